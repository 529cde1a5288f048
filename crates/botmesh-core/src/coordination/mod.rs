//! The plug-in point for running a bot as several replicas.
//!
//! `botmesh-core` defines these traits and calls them around every message; `botmesh-coord`
//! implements them over a coordination backend. The runtime code of `botmesh-core` sees the
//! replica protocol only through [`Coordination`], the [`Turn`] it grants and the
//! [`TurnRun`] a turn's work becomes, never the backend itself. Per chat, the bot asks two
//! things: tickets in arrival order ([`Coordination::take_tickets`]), and a turn
//! ([`Coordination::acquire`], then [`Coordination::begin`]) whose run hands it, in the
//! chat's journal order, what to handle and finishes each message. What moves journal records
//! between replicas (taking over, handing back, releasing) lives behind that seam; the bot
//! implements the journal operations it uses ([`Journal`]). A bot built without coordination
//! never touches any of it: its turns are a small local run of the job's own work.
//!
//! `run.rs` holds the types of a turn's work, `slot.rs` the fence every effect goes through.

mod run;
mod slot;

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    ChatKey, ClusterView, Error, InboxRecord, JournaledTicket, ReleaseOptions, Ticket,
    TransportStatus, async_trait,
};

pub(crate) use self::run::Local;
pub use self::run::{Claim, Item, Journal, Outcome, Own, RELEASED, Recorded, Taken, TurnRun};
pub(crate) use self::slot::TurnSlot;
use crate::status::{CoordinationStatus, ReplicaStatus};
use crate::{BotError, Event};

/// A chat's turn, held by this replica while one message (or one conversation timer) is
/// handled.
pub trait Turn: Send + Sync + 'static {
    /// The chat key.
    fn key(&self) -> &ChatKey;

    /// The turn's fence: grows with every grant of the key.
    fn fence(&self) -> u64;

    /// Whether this replica may still act for the chat: `Err(LeaseLost)` once the turn is
    /// known lost (the replica stalled past its lease, or gave its leases up). Called right
    /// before every send and every checkpoint write.
    fn check(&self) -> Result<(), Error>;

    /// Whether another replica, or an unknown one, held the chat since this replica last
    /// did. In-memory conversation state of the chat is stale then.
    fn changed_hands(&self) -> bool;

    /// The incarnations passed over before this turn (taken for dead, or handing their work
    /// back): their unfinished journaled messages of the chat come first.
    fn passed_over(&self) -> &[String] {
        &[]
    }
}

/// One of the bot's providers, as the coordination runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportInfo {
    /// The provider's id.
    pub id: String,
    /// Whether it declares an exclusive session (elected under `provider:<id>`).
    pub exclusive: bool,
}

impl TransportInfo {
    /// Provider `id`, exclusive or shared.
    pub fn new(id: impl Into<String>, exclusive: bool) -> Self {
        Self { id: id.into(), exclusive }
    }
}

/// What the bot offers the coordination runtime: its events and its providers' transports.
#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Emits an event on the bot's event stream.
    fn emit(&self, event: Event);

    /// The bot's status, which the runtime publishes for the other replicas to read (see
    /// [`Coordination::cluster`]).
    fn status(&self) -> ReplicaStatus;

    /// The bot's providers, in the order they were added.
    fn transports(&self) -> Vec<TransportInfo>;

    /// Provider `provider`'s transport status (closed when it does not run here).
    fn transport_status(&self, provider: &str) -> TransportStatus;

    /// Whether this replica runs provider `provider`'s transport now.
    fn transport_running(&self, provider: &str) -> bool;

    /// Starts provider `provider`'s transport on this replica. Refused once the bot is
    /// stopping.
    async fn start_transport(&self, provider: &str) -> Result<(), BotError>;

    /// Stops provider `provider`'s transport on this replica; what it already received is
    /// still handled.
    async fn stop_transport(&self, provider: &str) -> Result<(), BotError>;
}

/// The coordination runtime a bot runs under when it is one of several replicas.
///
/// Built by `botmesh-coord`; handed to [`BotBuilder::coordination`](crate::BotBuilder::coordination).
#[async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// This replica's incarnation: the owner its journal records are written under, which
    /// other replicas ask [`is_alive`](Self::is_alive) about.
    fn incarnation(&self) -> String;

    /// Whether the replica incarnation `incarnation` is alive: its heartbeat has not run out.
    /// The journal's replay and the adoption of a redelivered message take over only what a
    /// dead incarnation left.
    async fn is_alive(&self, incarnation: &str) -> Result<bool, Error>;

    /// Tries to lead `name` (a durable task) for `lease`: `true` when this replica leads it
    /// now. Leadership only decides who tries to run an occurrence; the occurrence's claim in
    /// the store decides whether it runs.
    async fn lead(&self, name: &str, lease: Duration) -> Result<bool, Error>;

    /// How long a turn may stay held for a running conversation step before the step is cut
    /// short (its checkpoint kept) and the turn released.
    fn settle(&self) -> Duration;

    /// Starts heartbeats and, for each transport, either starts it at once (shared sessions)
    /// or campaigns for it (exclusive sessions, each elected on its own).
    async fn start(&self, host: Arc<dyn Host>) -> Result<(), BotError>;

    /// Gives the transport leaderships up and stops campaigning, so standbys can connect
    /// while this replica finishes what it queued. Heartbeats go on until [`stop`](Self::stop).
    async fn step_down(&self) {}

    /// Stops campaigning and heartbeats, and gives leaderships up.
    async fn stop(&self);

    /// Takes `count` tickets in the chat's queue, in order. Called in arrival order, as soon as
    /// messages are accepted; messages of one chat that arrived together share one call.
    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>, Error>;

    /// Whether this runtime's tickets and releases also write the inbox journal kept at
    /// `place` (the store's [`JournalStore::place`](botmesh_traits::JournalStore::place)):
    /// the bot then journals its messages with their tickets
    /// ([`take_tickets_journaling`](Self::take_tickets_journaling)), and a turn acknowledges
    /// its message with its release ([`Journal::rides_releases`]). Asked once, when the bot
    /// is built. The default is `false`.
    fn journals(&self, place: &str) -> bool {
        let _ = place;
        false
    }

    /// Journals `records` of chat `key` and takes a ticket for each one journaled now, in one
    /// backend call (see
    /// [`TurnJournal::take_tickets_journaling`](botmesh_traits::TurnJournal::take_tickets_journaling),
    /// whose answer this is).
    /// Called instead of [`take_tickets`](Self::take_tickets) when
    /// [`journals`](Self::journals) said so; after an error the bot journals and takes the
    /// tickets apart.
    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>, Error> {
        let _ = (key, records, retain);
        Err(Error::Unsupported { op: "take_tickets_journaling" })
    }

    /// Waits for the ticket's turn, at most the configured turn wait; fails with
    /// `CoordinationUnavailable` (and withdraws the ticket) when it does not come.
    async fn acquire(&self, ticket: Ticket) -> Result<Arc<dyn Turn>, Error>;

    /// Withdraws a ticket this replica will not use (the bot is stopping and hands its queued
    /// messages back): the chat's next ticket is not held up, and its holder is told this
    /// replica was passed over. A ticket already granted is given back.
    async fn withdraw(&self, ticket: Ticket);

    /// Begins the work of `turn`, just acquired for a job whose own work is `own`: what the
    /// turn is to run, in the chat's journal order. That is what the replicas its grant passed
    /// over (and, for a takeover, the incarnations in `sweep`) left unfinished in `journal`,
    /// around the job's own message; what follows a message still queued elsewhere is
    /// released for a later holder. `None` when the job's message was taken over by another
    /// replica while this one stalled: the turn was given back unused.
    async fn begin(
        &self,
        turn: Arc<dyn Turn>,
        own: Own,
        sweep: Vec<String>,
        journal: Option<Arc<dyn Journal>>,
    ) -> Option<Box<dyn TurnRun>>;

    /// Whether this replica cannot vouch for its leases right now: its last renewal is too
    /// old (it froze, or the backend does not answer), so its turns may already be another
    /// replica's. It refuses new webhook deliveries meanwhile: the sender delivers them to
    /// another replica, or again later.
    fn stalled(&self) -> bool {
        false
    }

    /// Gives a turn back. `options.used` is `false` when nothing happened under it (a timer
    /// that found its conversation stale or gone); `options.retain` is how long a conversation
    /// of the chat stays waiting in this replica's memory. A release that fails on the wire is
    /// retried by the runtime.
    async fn release(&self, turn: Arc<dyn Turn>, options: ReleaseOptions);

    /// This replica's coordination as its status shows it: its lease, its turns, what it
    /// leads. Read by [`Bot::status`](crate::Bot::status) and the health probes; cheap, and
    /// without a backend call.
    fn status(&self) -> CoordinationStatus {
        CoordinationStatus::default()
    }

    /// The replicas as the backend sees them: each one's last published status (see
    /// [`Host::status`]), and the leader of each exclusive transport. One read of the backend,
    /// for an operator; never on the message path.
    async fn cluster(&self) -> Result<ClusterView, Error> {
        Err(Error::Unsupported { op: "cluster" })
    }
}
