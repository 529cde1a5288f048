//! The metrics of three replicas, read back from the Prometheus endpoint: counts equal to what
//! was sent, histograms filled, a leadership change counted after the leader crashed.
//!
//! The three replicas run in this one process, so they share its recorder: each figure read
//! back is the sum over the replicas, which is what the test knows the answer of.

#![cfg(feature = "prometheus")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

#[path = "ops/support.rs"]
mod support;

use std::time::Duration;

use botmesh_core::Inbound;
use botmesh_ops::{Ops, install_prometheus};
use support::{get, replicas, serve, wa_leader};

const LEASE: Duration = Duration::from_secs(1);

/// The sum of the samples of `name` whose labels include `labels`; `None` when there is none.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let (metric, series_labels) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let has = |(k, v): &(&str, &str)| {
            series_labels.split(',').any(|pair| pair == format!("{k}=\"{v}\""))
        };
        if labels.iter().all(has) {
            let value: f64 = value.parse().expect("a sample value");
            found = Some(found.unwrap_or(0.0) + value);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_count_what_they_handled_and_a_crash_counts_a_leadership_change() {
    // Installed before the bots are built: they take their handles from it.
    let handle = install_prometheus().expect("the recorder installs");
    let replicas = replicas(&["a", "b", "c"], LEASE).await;
    let leader = wa_leader(&replicas, LEASE * 3).await;
    let addr = serve(Ops::new(replicas[0].bot.clone()).metrics(handle).token("scrape")).await;

    // 30 messages over the shared provider, spread over the replicas, 10 chats of 3 messages;
    // and 5 over the exclusive one, to its leader.
    for round in 0..3 {
        for n in 0..10 {
            // Ids unique over the replicas: each test provider numbers its own from 1.
            let (chat, id) = (format!("web-{n}"), format!("web-{n}-{round}"));
            let message = Inbound::text("web", id, chat.as_str(), format!("m{round}"));
            assert!(replicas[(n + round) % 3].web.inject(message));
        }
    }
    for n in 0..5 {
        replicas[leader].wa.say(&format!("wa-{n}"), "hi");
    }
    let sent = || replicas.iter().map(|r| r.web.sent_count() + r.wa.sent_count()).sum::<usize>();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while sent() < 35 {
        assert!(tokio::time::Instant::now() < deadline, "only {} of 35 replies went out", sent());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in &replicas {
        r.bot.wait_idle().await;
    }

    let (code, _) = get(addr, "/metrics", None).await;
    assert_eq!(code, 401, "the metrics are behind the token");
    let (code, text) = get(addr, "/metrics", Some("scrape")).await;
    assert_eq!(code, 200);
    let value = |name, labels| sample(&text, name, labels).unwrap_or(0.0);
    assert_eq!(value("botmesh_messages_received_total", &[("provider", "web")]), 30.0);
    assert_eq!(value("botmesh_messages_received_total", &[("provider", "wa")]), 5.0);
    assert_eq!(value("botmesh_messages_handled_total", &[("provider", "web")]), 30.0);
    assert_eq!(value("botmesh_messages_handled_total", &[("provider", "wa")]), 5.0);
    assert_eq!(value("botmesh_messages_failed_total", &[]), 0.0);
    assert_eq!(value("botmesh_messages_deduplicated_total", &[]), 0.0);
    // Every message waited for and held a turn once.
    assert_eq!(value("botmesh_turn_wait_seconds_count", &[]), 35.0, "{text}");
    assert_eq!(value("botmesh_turn_hold_seconds_count", &[]), 35.0);
    assert!(value("botmesh_turn_hold_seconds_sum", &[]) > 0.0);
    // The journal and the backend were called, and timed.
    let appends =
        value("botmesh_store_call_seconds_count", &[("op", "inbox_append"), ("outcome", "ok")]);
    assert_eq!(appends, 35.0, "one journal append per message");
    // Acknowledgements are written in batches, as many as the jobs left queued meanwhile.
    let batches =
        value("botmesh_store_call_seconds_count", &[("op", "inbox_ack_batch"), ("outcome", "ok")]);
    assert!((1.0..=35.0).contains(&batches), "{batches} acknowledgement batches for 35 messages");
    let failed = value("botmesh_store_call_seconds_count", &[("outcome", "error")]);
    assert_eq!(failed, 0.0, "no store call failed");
    let pending = replicas[0].bot.store().journal().expect("a journal").inbox_pending(100).await;
    assert_eq!(pending.expect("the journal reads").len(), 0, "every message acknowledged");
    assert!(
        value(
            "botmesh_coordinator_call_seconds_count",
            &[("op", "take_tickets"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert_eq!(value("botmesh_queue_depth", &[]), 0.0);
    assert_eq!(value("botmesh_turns_held", &[]), 0.0);
    assert_eq!(
        value("botmesh_leadership_changes_total", &[("transport", "wa"), ("change", "gained")]),
        1.0
    );
    // (`botmesh_leader` is per process: the three replicas here overwrite each other's.)
    // Labels are bounded: no chat key, no message id.
    assert!(!text.contains("web-0") && !text.contains("wa-0"), "a chat key became a label");
    // Every metric has its help text.
    assert!(text.contains("# HELP botmesh_turn_wait_seconds"));

    // The leader crashes: a standby takes wa over, and the change is counted.
    replicas[leader].coordinator.crash();
    let deadline = tokio::time::Instant::now() + LEASE * 4;
    let new_leader = loop {
        let running: Vec<usize> =
            (0..3).filter(|&i| i != leader && replicas[i].bot.runs_transport("wa")).collect();
        if let [one] = running.as_slice() {
            break *one;
        }
        assert!(tokio::time::Instant::now() < deadline, "no standby took wa over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_ne!(new_leader, leader);
    let (_, text) = get(addr, "/metrics", Some("scrape")).await;
    let value = |name, labels| sample(&text, name, labels).unwrap_or(0.0);
    assert_eq!(
        value("botmesh_leadership_changes_total", &[("transport", "wa"), ("change", "gained")]),
        2.0,
        "{text}"
    );
    assert!(
        value("botmesh_leadership_changes_total", &[("transport", "wa"), ("change", "lost")])
            >= 1.0
    );
    // A lease later, heartbeats ran: the survivors' renewed, the crashed replica's failed.
    assert!(value("botmesh_lease_renewals_total", &[("outcome", "ok")]) >= 2.0);
    assert!(
        value("botmesh_lease_renewals_total", &[("outcome", "error")]) >= 1.0,
        "the crashed replica's heartbeats fail"
    );
    for r in &replicas {
        let _ = r.bot.stop().await;
    }
}
