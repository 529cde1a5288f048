//! What a running bot tells its operators: metrics through the [`metrics`] facade, and one
//! `tracing` span per message.
//!
//! # Metrics
//!
//! botmesh records through the `metrics` facade and installs no recorder itself: install the
//! one you use (`metrics-exporter-prometheus`, or the `prometheus` feature of `botmesh-ops`,
//! which also serves it) **before building the bot**, since the bot takes its metric handles
//! when it is built. Call [`describe`] once the recorder is installed to give every metric its
//! help text and unit.
//!
//! Names follow the Prometheus conventions, and every label takes a bounded set of values: a
//! provider id, an operation, an outcome, a reason, a job name. A chat key is never a label.
//! The constants below are every metric botmesh records, with its kind and labels.
//!
//! # Spans
//!
//! Each message gets one span named `botmesh.message`, opened when the message arrives and
//! closed once it is acknowledged (or handed back), as a root of its own so that each message
//! is one trace. Its fields: `provider`, `chat`, `message.id`, `replica` (the incarnation that
//! handles it), `fence` (of the turn it ran under, once granted) and `outcome` (`handled`,
//! `failed`, `lost` (its turn was lost, or given up at `settle`, while it ran: the chat's next
//! holder handles it again),
//! `duplicate`, `refused`, `handed_back`). Inside it: `journal`, `ticket` (messages
//! that arrived together share one call: it follows from the others' spans), `turn.wait`,
//! `handle` (with the flow's `step` spans, `send` and `checkpoint` in it) and `finish` (the
//! acknowledgement and the turn's release). A message taken over from another
//! replica gets a span of its own on the replica that takes it over, with `taken_from` set;
//! with a [`TracePropagation`] configured (see
//! [`BotBuilder::trace_propagation`](crate::BotBuilder::trace_propagation)) it is also linked
//! to the span the message had where it arrived.

mod meters;
mod propagation;
mod span;
mod store;
mod timings;

pub(crate) use self::meters::{Meters, Tally, journal_backlog, observe};
pub use self::propagation::TracePropagation;
pub(crate) use self::span::MessageSpan;
pub(crate) use self::store::MeteredStore;
pub use self::timings::CallTimings;

/// Messages received from a provider (counter; label `provider`).
pub const MESSAGES_RECEIVED: &str = "botmesh_messages_received_total";
/// Messages handled: a conversation or the handlers took them (counter; label `provider`).
pub const MESSAGES_HANDLED: &str = "botmesh_messages_handled_total";
/// Messages whose handling reported an error, was cut short, or lost its turn (counter; label
/// `provider`).
pub const MESSAGES_FAILED: &str = "botmesh_messages_failed_total";
/// Messages dropped as duplicates of one already received (counter; label `provider`).
pub const MESSAGES_DEDUPLICATED: &str = "botmesh_messages_deduplicated_total";
/// How long a message waited for its chat's turn (histogram, seconds).
pub const TURN_WAIT: &str = "botmesh_turn_wait_seconds";
/// How long a chat's turn was held for one job (histogram, seconds).
pub const TURN_HOLD: &str = "botmesh_turn_hold_seconds";
/// Conversations that moved between replicas, by what became of them here (counter; label
/// `outcome`: `continued`, `dropped`, `notified`, `restarted`, `custom`, `discarded`).
pub const HANDOFFS: &str = "botmesh_handoffs_total";
/// Journaled messages another replica left, taken over here (counter).
pub const TAKEOVERS: &str = "botmesh_takeovers_total";
/// Turns given back with messages left for the chat's next holder (counter).
pub const HANDBACKS: &str = "botmesh_handbacks_total";
/// Heartbeats sent, renewing every lease of the replica (counter; label `outcome`: `ok`,
/// `error`).
pub const LEASE_RENEWALS: &str = "botmesh_lease_renewals_total";
/// Leases lost: a chat's turn, or the whole replica's (counter; label `reason`).
pub const LEASE_LOSSES: &str = "botmesh_lease_losses_total";
/// Leadership changes of exclusive transports on this replica (counter; labels `transport`,
/// the provider id, and `change`: `gained`, `lost`).
pub const LEADERSHIP_CHANGES: &str = "botmesh_leadership_changes_total";
/// Whether this replica leads an exclusive transport (gauge, 0 or 1; label `transport`).
pub const LEADER: &str = "botmesh_leader";
/// Jobs queued on this replica's chats and not finished (gauge).
pub const QUEUE_DEPTH: &str = "botmesh_queue_depth";
/// Conversations live in this replica's memory (gauge).
pub const CONVERSATIONS: &str = "botmesh_conversations_live";
/// Chat turns this replica holds now (gauge).
pub const TURNS_HELD: &str = "botmesh_turns_held";
/// Journal writes (acknowledgements, releases) that failed and wait in the repair queue
/// (gauge).
pub const JOURNAL_BACKLOG: &str = "botmesh_journal_backlog";
/// Sends under the outbox (with durability) that have not settled yet (gauge).
pub const OUTBOX_BACKLOG: &str = "botmesh_outbox_backlog";
/// Store calls (histogram, seconds; labels `op`, the store method, and `outcome`: `ok`,
/// `error`).
pub const STORE_CALLS: &str = "botmesh_store_call_seconds";
/// Coordination backend calls (histogram, seconds; labels `op`, the coordinator method, and
/// `outcome`: `ok`, `error`).
pub const COORDINATOR_CALLS: &str = "botmesh_coordinator_call_seconds";
/// Scheduled job occurrences run here (counter; labels `job`, `outcome`: `ok`, `error`).
pub const SCHEDULER_RUNS: &str = "botmesh_scheduler_runs_total";
/// Durable tasks that found occurrences missed while no replica ran, at the catch-up (counter;
/// label `job`).
pub const SCHEDULER_MISSES: &str = "botmesh_scheduler_misses_total";
/// Errors reported by the bot, by kind (counter; label `kind`).
pub const ERRORS: &str = "botmesh_errors_total";

/// Gives every metric above its help text and unit in the installed recorder. Call it once,
/// after installing the recorder; without one it does nothing.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(MESSAGES_RECEIVED, "Messages received from a provider");
    describe_counter!(MESSAGES_HANDLED, "Messages handled by a conversation or the handlers");
    describe_counter!(MESSAGES_FAILED, "Messages whose handling failed or was cut short");
    describe_counter!(MESSAGES_DEDUPLICATED, "Messages dropped as duplicates");
    describe_histogram!(TURN_WAIT, Unit::Seconds, "Wait for a chat's turn");
    describe_histogram!(TURN_HOLD, Unit::Seconds, "A chat's turn held for one job");
    describe_counter!(HANDOFFS, "Conversations that moved between replicas");
    describe_counter!(TAKEOVERS, "Journaled messages taken over from another replica");
    describe_counter!(HANDBACKS, "Turns given back with messages left for the next holder");
    describe_counter!(LEASE_RENEWALS, "Heartbeats renewing the replica's leases");
    describe_counter!(LEASE_LOSSES, "Leases lost");
    describe_counter!(LEADERSHIP_CHANGES, "Exclusive transport leadership changes");
    describe_gauge!(LEADER, "Whether this replica leads the exclusive transport");
    describe_gauge!(QUEUE_DEPTH, "Jobs queued on this replica's chats");
    describe_gauge!(CONVERSATIONS, "Conversations live in this replica's memory");
    describe_gauge!(TURNS_HELD, "Chat turns held by this replica");
    describe_gauge!(JOURNAL_BACKLOG, "Journal writes waiting in the repair queue");
    describe_gauge!(OUTBOX_BACKLOG, "Outbox sends not settled yet");
    describe_histogram!(STORE_CALLS, Unit::Seconds, "Store calls");
    describe_histogram!(COORDINATOR_CALLS, Unit::Seconds, "Coordination backend calls");
    describe_counter!(SCHEDULER_RUNS, "Scheduled job occurrences run");
    describe_counter!(SCHEDULER_MISSES, "Scheduled occurrences missed");
    describe_counter!(ERRORS, "Errors reported by the bot");
}

/// The `outcome` label of a call's result.
pub fn outcome<T, E>(result: &Result<T, E>) -> &'static str {
    if result.is_ok() { "ok" } else { "error" }
}
