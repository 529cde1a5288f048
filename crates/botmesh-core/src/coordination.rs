//! The plug-in point for running a bot as several replicas.
//!
//! `botmesh-core` defines these traits and calls them around every message; `botmesh-coord`
//! implements them over a coordination backend. The runtime code of `botmesh-core` sees the
//! replica protocol only through [`Coordination`] and [`Turn`], never the backend itself. A
//! bot built without coordination never touches them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use botmesh_traits::{ChatKey, Error, ReleaseOptions, Ticket, TransportStatus, async_trait};

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

/// What the bot offers the coordination runtime: its events and its transport.
#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Emits an event on the bot's event stream.
    fn emit(&self, event: Event);

    /// The provider's id.
    fn provider_id(&self) -> String;

    /// Whether the provider declares an exclusive session.
    fn provider_exclusive(&self) -> bool;

    /// The provider's transport status.
    fn transport_status(&self) -> TransportStatus;

    /// Whether this replica runs the transport now.
    fn transport_running(&self) -> bool;

    /// Starts the transport on this replica. Refused once the bot is stopping.
    async fn start_transport(&self) -> Result<(), BotError>;

    /// Stops the transport on this replica; what it already received is still handled.
    async fn stop_transport(&self) -> Result<(), BotError>;
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

    /// Starts heartbeats and, for the transport, either starts it at once (shared sessions) or
    /// campaigns for it (exclusive sessions).
    async fn start(&self, host: Arc<dyn Host>) -> Result<(), BotError>;

    /// Gives the transport leadership up and stops campaigning, so a standby can connect
    /// while this replica finishes what it queued. Heartbeats go on until [`stop`](Self::stop).
    async fn step_down(&self) {}

    /// Stops campaigning and heartbeats, and gives leaderships up.
    async fn stop(&self);

    /// Takes `count` tickets in the chat's queue, in order. Called in arrival order, as soon as
    /// messages are accepted; messages of one chat that arrived together share one call.
    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>, Error>;

    /// Waits for the ticket's turn, at most the configured turn wait; fails with
    /// `CoordinationUnavailable` (and withdraws the ticket) when it does not come.
    async fn acquire(&self, ticket: Ticket) -> Result<Arc<dyn Turn>, Error>;

    /// Withdraws a ticket this replica will not use (the bot is stopping and hands its queued
    /// messages back): the chat's next ticket is not held up, and its holder is told this
    /// replica was passed over. A ticket already granted is given back.
    async fn withdraw(&self, ticket: Ticket);

    /// When this replica last gave its leases up because it stalled, if it ever did. Its
    /// queued tickets may have been passed over since, and their messages taken over by
    /// another replica.
    fn given_up_at(&self) -> Option<tokio::time::Instant> {
        None
    }

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
}

/// The turn a chat's worker holds right now, shared with the contexts of that chat so that
/// their sends and checkpoint writes are fenced, and so that the worker can let the effects
/// already on the wire finish before it gives the turn up.
#[derive(Default)]
pub(crate) struct TurnSlot {
    turn: Mutex<Option<Arc<dyn Turn>>>,
    /// The message handled now is handled for the first time (journaled by this very job).
    first: AtomicBool,
    /// The job running under the turn was cut short (at `settle`, or by a stop): no new effect
    /// may start under it.
    cut: AtomicBool,
    /// Effects (sends, checkpoint writes) started and not finished.
    in_flight: AtomicUsize,
    /// Woken when the last effect in flight finishes.
    idle: Notify,
}

/// Counts an effect as in flight until it finishes or is dropped.
struct InFlight<'a>(&'a TurnSlot);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl TurnSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<dyn Turn>>> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says whether the message handled now is handled for the first time (journaled by this
    /// very job), as opposed to taken over, replayed or retried.
    pub(crate) fn set_first_attempt(&self, first: bool) {
        self.first.store(first, Ordering::SeqCst);
    }

    /// See [`TurnSlot::set_first_attempt`].
    pub(crate) fn first_attempt(&self) -> bool {
        self.first.load(Ordering::SeqCst)
    }

    pub(crate) fn set(&self, turn: Option<Arc<dyn Turn>>) {
        *self.lock() = turn;
    }

    pub(crate) fn take(&self) -> Option<Arc<dyn Turn>> {
        self.lock().take()
    }

    /// The fence of the turn held now, if any.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.lock().as_ref().map(|t| t.fence())
    }

    /// `Ok` outside a turn (no coordination, or work running after its turn, such as a
    /// background task), else the turn's own check; refused once the job was cut short.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &*self.lock() {
            Some(turn) if self.is_cut() => Err(Error::LeaseLost {
                key: turn.key().to_string(),
                reason: botmesh_traits::LeaseLostReason::Released,
            }),
            Some(turn) => turn.check(),
            None => Ok(()),
        }
    }

    /// Marks the job running under the turn as cut short (or not, for the next job).
    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// Whether the job running under the turn was cut short.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Runs an effect (a send, a checkpoint write) counted as in flight: a job cut short lets
    /// it finish before the turn goes, so it cannot land after the next holder started.
    ///
    /// The turn is checked again every time the effect is polled, before it makes progress: a
    /// process frozen in the middle of a send (after the check that let it start) wakes up to
    /// a lost turn and drops the send instead of finishing it out of turn. What the effect
    /// already handed to the network before the freeze reached it before the freeze, inside
    /// the turn.
    pub(crate) async fn effect<T, E, F>(&self, effect: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _counted = InFlight(self);
        let mut effect = std::pin::pin!(effect);
        std::future::poll_fn(|cx| {
            if let Err(lost) = self.check_turn() {
                return std::task::Poll::Ready(Err(lost.into()));
            }
            effect.as_mut().poll(cx)
        })
        .await
    }

    /// The turn's own check, without the cut: an effect started before a cut may finish.
    fn check_turn(&self) -> Result<(), Error> {
        match &*self.lock() {
            Some(turn) => turn.check(),
            None => Ok(()),
        }
    }

    /// Waits until no effect is in flight.
    pub(crate) async fn effects_done(&self) {
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}
