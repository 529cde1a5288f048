//! The checker's report as a table on standard output.

use std::collections::HashMap;

use botmesh_chaos::check::Report;

/// Prints `report`, one figure a line.
pub(crate) fn print(report: &Report) {
    let o = &report.outside_guarantees;
    let rows: Vec<(&str, String)> = vec![
        ("durability", if report.durability { "on".into() } else { "off".into() }),
        ("messages_sent", report.messages_sent.to_string()),
        ("messages_handled", report.messages_handled.to_string()),
        ("messages_replied", report.messages_replied.to_string()),
        ("overlaps", report.overlaps.to_string()),
        ("order_violations", report.order_violations.to_string()),
        ("lost", report.lost.to_string()),
        ("lost_allowed", report.lost_allowed.to_string()),
        ("duplicate_handled", report.duplicate_handled.to_string()),
        ("duplicate_sends", report.duplicate_sends.to_string()),
        ("stale_writes", report.stale_writes.to_string()),
        ("transport_overlaps", report.transport_overlaps.to_string()),
        ("double_grants", report.double_grants.to_string()),
        ("takeover_max_ms", report.takeover_max_ms.to_string()),
        ("transport_takeover_max_ms", report.transport_takeover_max_ms.to_string()),
        ("polling_sessions", report.polling_sessions.to_string()),
        ("lease_ms", report.lease_ms.to_string()),
        (
            "outside guarantees",
            format!(
                "lost {}, overlaps {}, order {}, duplicate sends {}, stale writes {}, \
                 transport overlaps {}, double grants {}, sends across stops {}, \
                 polls across stops {}",
                o.lost,
                o.overlaps,
                o.order_violations,
                o.duplicate_sends,
                o.stale_writes,
                o.transport_overlaps,
                o.double_grants,
                o.sends_across_stops,
                o.polls_across_stops,
            ),
        ),
        ("deliveries_refused", report.deliveries_refused.to_string()),
        ("sends_deduplicated", report.sends_deduplicated.to_string()),
    ];
    println!("\n{:<26} value", "figure");
    println!("{:-<26} {:-<40}", "", "");
    for (name, value) in rows {
        println!("{name:<26} {value}");
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for f in &report.faults {
        *counts.entry(f.kind.name()).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_unstable();
    let faults: Vec<String> = counts.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    println!("{:<26} {}", "faults", faults.join(", "));
}
