//! The checker's findings.

use serde::Serialize;

use super::input::{Acked, Fault, FaultKind};

/// What a fault outside the guarantees broke.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Outside {
    /// Messages lost across a restart of Redis with no data.
    pub lost: u64,
    /// Overlapping turns next to such a restart (fences start again from nothing).
    pub overlaps: u64,
    /// Messages handled out of order next to such a restart.
    pub order_violations: u64,
    /// Replies delivered twice next to such a restart.
    pub duplicate_sends: u64,
    /// Checkpoint writes from a superseded holder next to such a restart.
    pub stale_writes: u64,
    /// Sends that passed their turn's check before their replica was stopped and reached the
    /// platform after the stop began. The overlaps and order violations they alone make are
    /// counted in `overlaps` and `order_violations` above.
    pub sends_across_stops: u64,
    /// Polls of a session superseded next to such a restart (leaderships start over too).
    pub transport_overlaps: u64,
    /// Polls let go before their replica was stopped that reached the platform after another
    /// replica's session opened.
    pub polls_across_stops: u64,
    /// Double grants next to such a fault (see [`Report::double_grants`]).
    pub double_grants: u64,
}

/// A lost message the spec allows without durability: it waited on a replica that died (or
/// froze past its lease), or Redis failed while it waited for its turn or was handled.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Accounted {
    /// The chat number.
    pub chat: u32,
    /// The message number.
    pub seq: u32,
    /// The replica that acknowledged it.
    pub replica: String,
    /// What happened to that replica after it acknowledged the message.
    pub fault: FaultKind,
    /// How long after the acknowledgement the fault began (0 when the message arrived while
    /// it lasted).
    pub waited_ms: u64,
}

impl Accounted {
    /// Message `acked`, put down to fault `fault`.
    pub(super) fn new(acked: &Acked, fault: &Fault) -> Self {
        Self {
            chat: acked.chat,
            seq: acked.seq,
            replica: acked.replica.clone(),
            fault: fault.kind,
            waited_ms: fault.t.saturating_sub(acked.t) / 1_000_000,
        }
    }
}

/// The checker's findings.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    /// Turns of one chat under different fences whose effects overlapped in time.
    pub overlaps: u64,
    /// Messages whose first reply came before the first reply of an earlier message of their
    /// chat.
    pub order_violations: u64,
    /// Acknowledged messages that never got a reply, and that the spec does not allow to lose.
    pub lost: u64,
    /// Lost messages the spec allows (durability off: waiting on a replica that died, or on
    /// Redis while it failed).
    pub lost_allowed: u64,
    /// Messages taken by a handler more than once (at-least-once after a crash).
    pub duplicate_handled: u64,
    /// Replies delivered more than once.
    pub duplicate_sends: u64,
    /// Checkpoint writes that landed from a holder superseded before it issued them.
    pub stale_writes: u64,
    /// Polls of the exclusive transport's session made, or still in flight, after another
    /// replica's session had opened: two replicas on the transport at once.
    pub transport_overlaps: u64,
    /// Messages acknowledged to the load generator.
    pub messages_sent: u64,
    /// Distinct messages some handler took.
    pub messages_handled: u64,
    /// Distinct messages that got a reply.
    pub messages_replied: u64,
    /// The longest time from a replica's kill to the first reply on every chat it left waiting.
    pub takeover_max_ms: u64,
    /// Each kill's takeover time, in ms.
    pub takeovers_ms: Vec<u64>,
    /// How many polling sessions were opened.
    pub polling_sessions: u64,
    /// For each kill or stop of the replica polling at the time: how long until another
    /// replica's session polled, in ms.
    pub transport_takeovers_ms: Vec<u64>,
    /// The longest of them.
    pub transport_takeover_max_ms: u64,
    /// The lease, in ms.
    pub lease_ms: u64,
    /// Whether durability was on.
    pub durability: bool,
    /// What faults outside the guarantees broke.
    pub outside_guarantees: Outside,
    /// The lost messages the spec allows, each with the fault that explains it.
    pub accounted: Vec<Accounted>,
    /// The messages a fault outside the guarantees found still waiting (a restart of Redis
    /// with no data, a failover that lost writes), with how long they had waited by then.
    pub wiped: Vec<Accounted>,
    /// Grants of a chat's turn under a fence granted on the chat before: the grant history
    /// went back (a failover lost writes), and two holders may act under one fence.
    pub double_grants: u64,
    /// The lost messages it does not allow (up to 50).
    pub lost_examples: Vec<(u32, u32)>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// Deliveries the load generator had to make again (a replica refused or was down).
    pub deliveries_refused: u64,
    /// Sends repeated under an idempotency key that the platform delivered once (a step run
    /// again after a crash between its send and the outbox's mark).
    pub sends_deduplicated: u64,
}

impl Report {
    /// Violations inside the guarantees: what fails a run.
    /// Sends delivered twice count only with durability: without it the spec does not
    /// deduplicate them (a step run again asks again).
    pub fn violations(&self) -> u64 {
        let duplicates = if self.durability { self.duplicate_sends } else { 0 };
        self.overlaps
            + self.order_violations
            + self.lost
            + duplicates
            + self.stale_writes
            + self.transport_overlaps
            + self.double_grants
    }
}
