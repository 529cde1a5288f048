//! The Grafana dashboard (`docs/grafana/botmesh.json`) against the metrics the runtime records:
//! it names no metric that does not exist, and leaves none out. A metric renamed in
//! `botmesh_core::telemetry` breaks this build or this test until the dashboard follows.

use std::collections::BTreeSet;

use botmesh_core::telemetry;
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../../docs/grafana/botmesh.json");

/// Every metric botmesh records, by its constant: one renamed or removed breaks the build.
const METRICS: [&str; 23] = [
    telemetry::MESSAGES_RECEIVED,
    telemetry::MESSAGES_HANDLED,
    telemetry::MESSAGES_FAILED,
    telemetry::MESSAGES_DEDUPLICATED,
    telemetry::TURN_WAIT,
    telemetry::TURN_HOLD,
    telemetry::HANDOFFS,
    telemetry::TAKEOVERS,
    telemetry::HANDBACKS,
    telemetry::LEASE_RENEWALS,
    telemetry::LEASE_LOSSES,
    telemetry::LEADERSHIP_CHANGES,
    telemetry::LEADER,
    telemetry::QUEUE_DEPTH,
    telemetry::CONVERSATIONS,
    telemetry::TURNS_HELD,
    telemetry::JOURNAL_BACKLOG,
    telemetry::OUTBOX_BACKLOG,
    telemetry::STORE_CALLS,
    telemetry::COORDINATOR_CALLS,
    telemetry::SCHEDULER_RUNS,
    telemetry::SCHEDULER_MISSES,
    telemetry::ERRORS,
];

/// Every `botmesh_[a-z_]+` name in `text`, without the `_bucket`, `_count` and `_sum` suffixes
/// of a histogram's series.
fn metric_names(text: &str) -> BTreeSet<String> {
    const START: &str = "botmesh_";
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(START) {
        if text[..at].chars().next_back().is_some_and(word) {
            continue;
        }
        let rest = &text[at + START.len()..];
        let len = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(rest.len());
        let name = &text[at..at + START.len() + len];
        let name = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(name.to_owned());
    }
    names
}

/// The panels, rows included, at any depth.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

#[test]
fn the_dashboard_names_only_metrics_the_runtime_records() {
    let known: BTreeSet<&str> = METRICS.into_iter().collect();
    let unknown: Vec<_> =
        metric_names(DASHBOARD).into_iter().filter(|n| !known.contains(n.as_str())).collect();
    assert!(unknown.is_empty(), "the dashboard names metrics botmesh does not record: {unknown:?}");
}

#[test]
fn every_metric_the_runtime_records_is_on_the_dashboard() {
    let named = metric_names(DASHBOARD);
    let missing: Vec<_> = METRICS.into_iter().filter(|m| !named.contains(*m)).collect();
    assert!(missing.is_empty(), "metrics without a panel: {missing:?}");
}

#[test]
fn every_panel_says_what_it_shows_and_asks_the_chosen_prometheus() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| variables.iter().find(|v| v["name"] == name).unwrap();
    assert_eq!(variable("DS_PROMETHEUS")["type"], "datasource");
    assert_eq!(variable("instance")["datasource"]["uid"], "${DS_PROMETHEUS}");
    let panels = panels(&dashboard);
    assert!(panels.len() > 20);
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title: {panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert!(panel["description"].as_str().is_some_and(|d| !d.is_empty()), "{title}");
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains("instance=~\"$instance\""), "{title}: {expr}");
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        }
    }
}

#[test]
fn names_are_read_whole_without_histogram_suffixes() {
    let text =
        r#"rate(botmesh_turn_wait_seconds_bucket{a="b"}[5m]) / x_botmesh_no botmesh_errors_total"#;
    let names: Vec<_> = metric_names(text).into_iter().collect();
    assert_eq!(names, ["botmesh_errors_total", "botmesh_turn_wait_seconds"]);
}
