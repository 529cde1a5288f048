//! The work of one turn, as the seam carries it: what the worker hands the coordination
//! runtime when a turn begins ([`Own`]), what the runtime hands back to run, one item at a time
//! and in the chat's journal order ([`TurnRun`], [`Item`]), what each run came to
//! ([`Outcome`]), and the journal operations the runtime needs for that ([`Journal`]),
//! implemented by the bot over its store.
//!
//! The runtime decides everything about moving journal records between replicas: which records
//! a grant's passed-over replicas left, in which order they come around the job's own message,
//! what is acknowledged, what is handed back, what is released for a later holder. The worker
//! only runs what it is given and says how it went.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{ChatKey, Error, Inbound, InboxRecord, MessageId, async_trait};
use tokio::time::Instant;

use crate::{BotError, Event};

/// The owner a journal record has between two replicas: released by the one that could not
/// finish it, for whoever holds the chat next.
pub const RELEASED: &str = "released";

/// A journaled message a job handles, as the journal has it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its journal id.
    pub id: String,
    /// Since when it is this replica's (journaled or taken over here).
    pub since: Instant,
    /// The message's id, as its provider gave it.
    pub message: MessageId,
}

/// The job's own work, as a turn begins.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per turn, moved once; boxing would allocate for each"
)]
pub enum Own {
    /// A message in the journal.
    Journaled(Recorded),
    /// Work the journal does not hold: a conversation timer, or a message without durability.
    Unjournaled,
    /// Nothing of its own: a takeover of what other replicas left.
    Nothing,
}

/// What a turn hands the worker to run next.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per message handled, moved once; boxing would allocate for each"
)]
pub enum Item {
    /// A journaled message another replica left, claimed for this turn.
    TakenOver {
        /// The message, and where it came from.
        taken: Taken,
        /// Whether in-memory conversation state of the chat is stale (the first item of a
        /// turn that changed hands).
        changed_hands: bool,
    },
    /// The job's own work.
    Own {
        /// As for [`Item::TakenOver`].
        changed_hands: bool,
    },
}

/// What running one item came to: how the turn finishes its message (acknowledged, or handed
/// back).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// It did something under the turn (a stale timer does not).
    pub used: bool,
    /// Cut short with its message's effect held by no checkpoint.
    pub cut: bool,
    /// It failed on a backend or the transport (a store write, a send, the turn), not on the
    /// bot's own logic.
    pub faulted: bool,
    /// It needed a transport that runs on another replica (a send refused with
    /// `ProviderNotLeader`): the message is handed back for the replica that runs it, and this
    /// run is not counted as one of its attempts.
    pub elsewhere: bool,
}

impl Outcome {
    /// Whether the message's effect may not have reached anyone or may not be stored: with
    /// durability it is handed back rather than acknowledged.
    pub fn unfinished(self) -> bool {
        self.cut || self.faulted || self.elsewhere
    }

    /// Whether handing the message back counts as one of its attempts (see
    /// [`Durability::max_attempts`](crate::Durability::max_attempts)): it was cut short or
    /// failed here, not only sent to a transport that runs elsewhere.
    pub fn counts_as_attempt(self) -> bool {
        self.cut || self.faulted
    }
}

/// A journaled message claimed from the replica that left it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Taken {
    /// The message.
    pub inbound: Inbound,
    /// The incarnation it was claimed from ([`RELEASED`] for a hand-back).
    pub from: String,
    /// The trace context its journal record keeps (see
    /// [`TracePropagation`](crate::telemetry::TracePropagation)).
    pub trace: Option<String>,
}

impl Taken {
    /// A message claimed from `from`, without a trace context.
    pub fn new(inbound: Inbound, from: impl Into<String>) -> Self {
        Self { inbound, from: from.into(), trace: None }
    }
}

/// What [`Journal::claim`] found.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per journal record taken over, moved once; boxing would allocate for each"
)]
pub enum Claim {
    /// This replica's now, to handle.
    Claimed(Taken),
    /// Nothing to handle: acknowledged meanwhile, gone from the journal, or corrupt (reported
    /// and acknowledged, so nobody tries again).
    Gone,
    /// Still pending under someone else (or unknown: the store failed, reported), who may be
    /// handling it now: what comes after it in the journal must wait for it.
    Held,
}

/// The journal operations a turn needs, implemented by the bot over its store. Writes that
/// fail are reported and retried by the bot's repair queue; reads that fail are reported and
/// answered conservatively, as each method says.
#[async_trait]
pub trait Journal: Send + Sync + 'static {
    /// This replica's incarnation: the owner of what it journals.
    fn owner(&self) -> &str;

    /// Chat `key`'s pending records, oldest first, at most `limit`.
    async fn pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>, Error>;

    /// Record `id`, pending or acknowledged, while the journal remembers it.
    async fn get(&self, id: &str) -> Result<Option<InboxRecord>, Error>;

    /// Claims record `id` back from [`RELEASED`] for this replica.
    async fn take_back(&self, id: &str) -> Result<bool, Error>;

    /// Whether record `id` is still pending and this replica's, taking it back if it was
    /// released meanwhile. A store error counts as yes: handling a message twice beats losing
    /// it.
    async fn still_ours(&self, key: &ChatKey, id: &str) -> bool;

    /// Claims pending `record` from its owner for this replica and reads its message back
    /// (announced as [`Event::TakenOver`]).
    async fn claim(&self, record: &InboxRecord) -> Claim;

    /// Acknowledges record `id`: handled. The id is the caller's to give: it is kept until the
    /// acknowledgement is written.
    async fn acknowledge(&self, key: &ChatKey, id: String);

    /// Releases record `id`, owned by `from`, for the chat's next holder.
    async fn release(&self, key: &ChatKey, id: &str, from: &str);

    /// Gives back message `message` (journaled as `id`), which this replica could not finish:
    /// released for the chat's next holder, unless its handling `failed` for the last allowed time here, which gives up on
    /// it (reported, acknowledged).
    async fn give_back(&self, key: &ChatKey, message: &MessageId, id: &str, failed: bool);

    /// Whether a turn acknowledges its message with its release: the coordination writes
    /// this journal (see [`Coordination::journals`](super::Coordination::journals)). The
    /// runtime then asks its backend for both in one call, and calls
    /// [`acknowledged`](Self::acknowledged) once it is done, or
    /// [`acknowledge`](Self::acknowledge) as usual when the backend did not do it.
    fn rides_releases(&self) -> bool {
        false
    }

    /// Record `id` was acknowledged with its turn's release.
    fn acknowledged(&self, id: &str) {
        let _ = id;
    }

    /// Reports an error of chat `key`.
    fn report(&self, key: &ChatKey, error: BotError);

    /// Emits an event.
    fn emit(&self, event: Event);
}

/// The work of one turn: the items to run under it, in the chat's journal order, and the turn
/// given back at the end.
#[async_trait]
pub trait TurnRun: Send {
    /// The next item to run under the turn; `None` once the turn's work is done (or the turn
    /// was lost, and what was left is released for the next holder).
    async fn next(&mut self) -> Option<Item>;

    /// What running the item [`next`](Self::next) returned last came to.
    async fn done(&mut self, outcome: Outcome);

    /// Gives the turn back (acknowledging the job's message at the same time), marked as a
    /// hand-back when something was left for the next holder. `retain` is how long a
    /// conversation of the chat waits in this replica's memory.
    /// Called once, after [`next`](Self::next) returned `None`.
    async fn finish(&mut self, retain: Option<Duration>);
}

/// The work of a turn without coordination (one process): the job's own work alone, then its
/// message acknowledged, or handed back when its effect may not be stored.
pub(crate) struct Local {
    key: ChatKey,
    own: Own,
    journal: Option<Arc<dyn Journal>>,
    ran: bool,
    ack: Option<String>,
}

impl Local {
    pub(crate) fn new(key: ChatKey, own: Own, journal: Option<Arc<dyn Journal>>) -> Self {
        Self { key, own, journal, ran: false, ack: None }
    }
}

#[async_trait]
impl TurnRun for Local {
    async fn next(&mut self) -> Option<Item> {
        if std::mem::replace(&mut self.ran, true) || matches!(self.own, Own::Nothing) {
            return None;
        }
        Some(Item::Own { changed_hands: false })
    }

    async fn done(&mut self, outcome: Outcome) {
        let Own::Journaled(recorded) = std::mem::replace(&mut self.own, Own::Nothing) else {
            return;
        };
        let Some(journal) = &self.journal else { return };
        if outcome.unfinished() {
            let failed = outcome.counts_as_attempt();
            journal.give_back(&self.key, &recorded.message, &recorded.id, failed).await;
        } else {
            self.ack = Some(recorded.id);
        }
    }

    async fn finish(&mut self, _retain: Option<Duration>) {
        if let (Some(id), Some(journal)) = (self.ack.take(), &self.journal) {
            journal.acknowledge(&self.key, id).await;
        }
    }
}
