//! The status page: one server-rendered HTML document that reloads itself, with no script.
//! Everything it prints goes through maud's escaping.

use std::time::Duration;

use botmesh_core::status::{ClusterReplica, Recent, ReplicaStatus};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::snapshot::Snapshot;

/// How many held turns and events the page lists at most.
const ROWS: usize = 40;

const CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d2330;background:#f7f8fa}
h1{font-size:1.4rem;margin:0}h2{font-size:1.05rem;margin:1.6rem 0 .5rem}
.meta{color:#5b6475;margin:.2rem 0 1rem}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0001}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #e6e8ee;white-space:nowrap}
th{font-weight:600;color:#5b6475;background:#f0f2f6}
.ok{color:#13795b;font-weight:600}.bad{color:#b42318;font-weight:600}.warn{color:#b54708}
.mono{font-family:ui-monospace,monospace;font-size:12.5px}.empty{color:#8a93a6;font-style:italic}
.badge{display:inline-block;padding:.1rem .5rem;border-radius:1rem;margin-right:.4rem;background:#e6e8ee}
";

/// A duration as people read it.
fn age(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// The first characters of an incarnation: enough to tell two apart.
fn short(incarnation: &str) -> &str {
    incarnation.get(..8).unwrap_or(incarnation)
}

fn yes(ok: bool, good: &str, bad: &str) -> Markup {
    html! { span class=(if ok { "ok" } else { "bad" }) { (if ok { good } else { bad }) } }
}

/// The replicas to show: the cluster's, or this one alone.
fn replicas(s: &Snapshot) -> Vec<ClusterReplica> {
    match &s.cluster {
        Some(cluster) => cluster.replicas.clone(),
        None => {
            let mut me = ClusterReplica::default();
            me.replica_id =
                s.replica.replica_id.clone().unwrap_or_else(|| "this process".to_owned());
            me.incarnation = s.replica.incarnation.clone();
            me.alive = s.replica.running;
            me.status = Some(s.replica.clone());
            vec![me]
        }
    }
}

pub(crate) fn render(s: &Snapshot, refresh: Duration) -> Markup {
    let replicas = replicas(s);
    let me = s.replica.replica_id.as_deref().unwrap_or("this process");
    // Whole seconds: browsers drop a fraction (and would reload at once).
    let refresh_s = refresh.as_secs().max(1);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(refresh_s);
                title { "botmesh status" }
                style { (PreEscaped(CSS)) }
            }
            body {
                h1 { "botmesh replicas" }
                p.meta {
                    "As seen by replica " span #observer .mono { (me) }
                    " · reloads every " (refresh_s) " s · "
                    span #health {
                        span.badge { "live " (yes(s.health.live, "yes", "no")) }
                        span.badge { "ready " (yes(s.health.ready, "yes", "no")) }
                    }
                    @for reason in &s.health.reasons { " " span.warn { (reason) } }
                }
                @if let Some(error) = &s.cluster_error {
                    p.bad #cluster-error { "The coordination backend could not be read: " (error) }
                }
                (leaders(s))
                (replica_table(&replicas))
                (turns(&replicas))
                (events(&replicas, s.generated_at_ms))
            }
        }
    }
}

fn leaders(s: &Snapshot) -> Markup {
    let leaders = s.cluster.as_ref().map(|c| c.leaders.as_slice()).unwrap_or_default();
    html! {
        h2 { "Exclusive transports" }
        table #leaders {
            thead { tr { th { "transport" } th { "leader" } th { "incarnation" } th { "fence" } th { "leader alive" } } }
            tbody {
                @for l in leaders {
                    tr.leader data-transport=(l.transport) data-replica=(l.replica_id) {
                        td.transport { (l.transport) }
                        td.replica.mono { (l.replica_id) }
                        td.mono { (short(&l.incarnation)) }
                        td.fence { (l.fence) }
                        td { (yes(l.alive, "alive", "dead: a standby takes over")) }
                    }
                }
                @if leaders.is_empty() {
                    tr { td.empty colspan="5" { "no exclusive transport is led" } }
                }
            }
        }
    }
}

/// The lease's health: when it was last renewed, as of now (the status is `published_ms_ago`
/// old), against its length.
fn lease(replica: &ClusterReplica, status: &ReplicaStatus) -> Markup {
    match &status.coordination {
        None => html! { span.empty { "not coordinated" } },
        Some(_) if !replica.alive => html! { span.bad { "lapsed" } },
        Some(c) if c.stalled => html! { span.bad { "stalled" } },
        Some(c) => {
            let renewed = c.renewed_ms_ago.saturating_add(replica.published_ms_ago);
            let class = match renewed {
                r if r > c.lease_ms => "bad",
                r if r > c.lease_ms / 2 => "warn",
                _ => "ok",
            };
            html! { span class=(class) { "renewed " (age(renewed)) " ago" } " / " (age(c.lease_ms)) }
        }
    }
}

fn replica_table(replicas: &[ClusterReplica]) -> Markup {
    html! {
        h2 { "Replicas" }
        table #replicas {
            thead { tr {
                th { "replica" } th { "incarnation" } th { "alive" } th { "status published" }
                th { "lease" } th { "queue" } th { "conversations" } th { "turns held" }
                th { "backlog (journal / outbox)" } th { "transports" } th { "leads" }
            } }
            tbody {
                @for r in replicas {
                    tr.replica data-replica=(r.replica_id) data-alive=(r.alive) {
                        td.mono { (r.replica_id) }
                        td.mono { (short(&r.incarnation)) }
                        td { (yes(r.alive, "alive", "dead")) }
                        td { (age(r.published_ms_ago)) " ago" }
                        @match &r.status {
                            Some(st) => {
                                td { (lease(r, st)) }
                                td.queue { (st.queue_depth) }
                                td { (st.conversations) }
                                td { (st.coordination.as_ref().map_or(0, |c| c.turns_held)) }
                                td { (st.journal_backlog) " / " (st.outbox_backlog) }
                                td {
                                    @for t in &st.transports {
                                        span.badge {
                                            (t.provider)
                                            @if t.exclusive { " (exclusive)" }
                                            ": "
                                            (if t.open { "open" } else if t.running { "connecting" } else { "standby" })
                                        }
                                    }
                                }
                                td.mono {
                                    @for l in st.coordination.iter().flat_map(|c| &c.leading) {
                                        (l.name) " #" (l.fence) " "
                                    }
                                }
                            }
                            None => { td.empty colspan="7" { "status unreadable (another version?)" } }
                        }
                    }
                }
            }
        }
    }
}

fn turns(replicas: &[ClusterReplica]) -> Markup {
    let mut rows: Vec<(&str, &botmesh_core::status::HeldTurn)> = replicas
        .iter()
        .filter_map(|r| Some((r.replica_id.as_str(), r.status.as_ref()?.coordination.as_ref()?)))
        .flat_map(|(id, c)| c.oldest_turns.iter().map(move |t| (id, t)))
        .collect();
    rows.sort_by_key(|(_, t)| std::cmp::Reverse(t.held_ms));
    rows.truncate(ROWS);
    html! {
        h2 { "Held turns (longest first)" }
        table #turns {
            thead { tr { th { "chat" } th { "holder" } th { "fence" } th { "held for" } } }
            tbody {
                @for (holder, t) in &rows {
                    tr { td.mono { (t.chat) } td.mono { (holder) } td { (t.fence) } td { (age(t.held_ms)) } }
                }
                @if rows.is_empty() { tr { td.empty colspan="4" { "no turn is held" } } }
            }
        }
    }
}

fn events(replicas: &[ClusterReplica], now_ms: u64) -> Markup {
    let mut rows: Vec<(&str, &Recent)> = replicas
        .iter()
        .filter_map(|r| Some((r.replica_id.as_str(), r.status.as_ref()?)))
        .flat_map(|(id, st)| st.recent.iter().map(move |e| (id, e)))
        .collect();
    rows.sort_by_key(|(_, e)| std::cmp::Reverse(e.at_ms));
    rows.truncate(ROWS);
    html! {
        h2 { "Recent hand-overs, takeovers, leadership changes and errors" }
        table #events {
            thead { tr { th { "when" } th { "replica" } th { "what" } th { "chat" } th { "detail" } } }
            tbody {
                @for (replica, e) in &rows {
                    tr.event data-kind=(e.kind) {
                        td { (age(now_ms.saturating_sub(e.at_ms))) " ago" }
                        td.mono { (replica) }
                        td class=(if e.kind == "error" || e.kind == "lease_lost" { "bad" } else { "" }) { (e.kind) }
                        td.mono { (e.chat.as_deref().unwrap_or("")) }
                        td { (e.detail) }
                    }
                }
                @if rows.is_empty() { tr { td.empty colspan="5" { "nothing yet" } } }
            }
        }
    }
}
