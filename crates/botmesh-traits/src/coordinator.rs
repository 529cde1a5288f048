//! The coordination side: which replica handles each chat, and which one holds an exclusive
//! transport.

use std::time::Duration;

use async_trait::async_trait;

use crate::{ChatKey, ClusterView, Result, TurnJournal};

/// A place in a chat's queue, taken when a message is persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ticket {
    /// The chat key.
    pub key: ChatKey,
    /// The ticket's number; turns go to tickets in increasing order.
    pub seq: u64,
    /// The turn, when it was free and granted with the ticket in the same round trip.
    pub grant: Option<TurnGrant>,
}

impl Ticket {
    /// A ticket, with the turn if it came with it.
    pub fn new(key: impl Into<ChatKey>, seq: u64, grant: Option<TurnGrant>) -> Self {
        Self { key: key.into(), seq, grant }
    }
}

/// The right to handle a chat's next message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnGrant {
    /// The chat key.
    pub key: ChatKey,
    /// The ticket this turn belongs to.
    pub seq: u64,
    /// Grows with every grant on the key, also across an eviction of idle state.
    pub fence: u64,
    /// The replica that held the previous turn, or `None` when unknown (a re-created chat):
    /// a different or unknown previous holder means in-memory state must be refreshed.
    pub previous_holder: Option<String>,
    /// The incarnations passed over on the key since its previous grant: a holder or queued
    /// tickets taken for dead, and holders that handed their work back
    /// ([`ReleaseOptions::hand_back`]). Whatever they journaled for the chat and did not
    /// finish comes before this grant's own message, so the new holder handles it first.
    pub passed_over: Vec<String>,
}

impl TurnGrant {
    /// A grant.
    pub fn new(
        key: impl Into<ChatKey>,
        seq: u64,
        fence: u64,
        previous_holder: Option<String>,
    ) -> Self {
        Self { key: key.into(), seq, fence, previous_holder, passed_over: Vec::new() }
    }

    /// The same grant, naming the incarnations passed over before it.
    pub fn with_passed_over(mut self, passed_over: Vec<String>) -> Self {
        self.passed_over = passed_over;
        self
    }
}

/// How a turn is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseOptions {
    /// Whether anything happened under the turn. An unused turn (a conversation timer that
    /// found its conversation stale or gone) leaves the chat's previous holder as it was, so a
    /// replica whose in-memory conversation is still current does not drop it because another
    /// replica only looked.
    pub used: bool,
    /// How long the holder keeps a conversation of the chat waiting in memory. The backend
    /// remembers the chat's last holder at least this long, so that the holder can tell later
    /// whether its copy is still current; without it, idle chat state may be dropped soon.
    pub retain: Option<Duration>,
    /// The holder hands its unfinished work back: it lost the turn while handling a journaled
    /// message (it stalled past its lease). The backend names it in the next grant's
    /// [`TurnGrant::passed_over`], so the next holder takes that message first.
    pub hand_back: bool,
}

impl ReleaseOptions {
    /// A used turn, with no conversation waiting.
    pub const fn used() -> Self {
        Self { used: true, retain: None, hand_back: false }
    }

    /// An unused turn.
    pub const fn unused() -> Self {
        Self { used: false, retain: None, hand_back: false }
    }

    /// Keeps the chat's state for `retain`.
    pub const fn retain(mut self, retain: Option<Duration>) -> Self {
        self.retain = retain;
        self
    }

    /// Hands the holder's unfinished work back (see [`ReleaseOptions::hand_back`]).
    pub const fn handing_back(mut self) -> Self {
        self.hand_back = true;
        self
    }
}

/// Leadership of a named role, such as `provider:<id>` or a singleton job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leadership {
    /// The role.
    pub name: String,
    /// Grows with every change of leader.
    pub fence: u64,
}

impl Leadership {
    /// A leadership with its fence.
    pub fn new(name: impl Into<String>, fence: u64) -> Self {
        Self { name: name.into(), fence }
    }
}

/// The heartbeat lease of a coordinator that was not given one: 15 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// A coordination backend shared by the replicas of one bot.
///
/// Implementations keep, per chat key, a queue of tickets and the current holder of the turn,
/// and per replica incarnation a heartbeat lease. A holder whose lease expired is treated as
/// dead: its turn is taken back and its queued tickets are skipped. The turns and leaderships
/// an incarnation holds live exactly as long as its heartbeat lease, so one
/// [`heartbeat`](Coordinator::heartbeat) renews all of them.
///
/// Fences (of turns and of leaderships) come from one counter per backend that only grows, so
/// they stay monotonic per key also when idle state is evicted and re-created.
///
/// For operators, a backend may also keep one status document per incarnation
/// ([`publish_status`](Coordinator::publish_status)) and show them with the leaderships'
/// holders in a read-only [`ClusterView`] ([`cluster`](Coordinator::cluster)).
#[async_trait]
pub trait Coordinator: Send + Sync + 'static {
    /// The replica's id, unique among running replicas.
    fn replica_id(&self) -> &str;

    /// A nonce unique to this coordinator instance. A replica restarted with the same id has a
    /// new incarnation and never inherits the tickets of the process that died.
    fn incarnation(&self) -> &str;

    /// This replica's heartbeat lease: how long its turns and leaderships outlive its last
    /// renewal, so the takeover time after a crash. The coordination runtime renews it every
    /// third of it; it is set on the coordinator, and only there. Defaults to [`DEFAULT_LEASE`].
    fn lease(&self) -> Duration {
        DEFAULT_LEASE
    }

    /// Whether turn wake-ups reach this coordinator as they happen. A backend that pushes
    /// them over a subscription says `false` until it is subscribed and while the
    /// subscription is down (its waiters poll meanwhile); a replica is not ready until it is.
    /// The default, for a backend that needs no subscription, is `true`.
    fn subscribed(&self) -> bool {
        true
    }

    /// The journal this coordinator writes with its tickets and releases, when it keeps them
    /// on the same backend as a store's inbox journal (see [`TurnJournal`]). The default, for
    /// a coordinator that cannot, is `None`.
    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        None
    }

    /// Takes a ticket in `key`'s queue, with the turn when it is free.
    async fn take_ticket(&self, key: &ChatKey) -> Result<Ticket>;

    /// Takes `count` tickets in `key`'s queue at once, in order, as a replica does for the
    /// messages of a chat that arrived together. The default takes them one by one.
    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>> {
        let mut tickets = Vec::with_capacity(count);
        for _ in 0..count {
            tickets.push(self.take_ticket(key).await?);
        }
        Ok(tickets)
    }

    /// Waits until `ticket`'s turn comes, at most `timeout`.
    ///
    /// Fails with [`Error::CoordinationUnavailable`](crate::Error::CoordinationUnavailable)
    /// when the time runs out or the backend cannot be reached.
    async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant>;

    /// Gives the turn back so the next ticket can run. Returns `false` when the turn was no
    /// longer ours.
    async fn release_turn(&self, grant: &TurnGrant) -> Result<bool>;

    /// Gives a turn back with what the holder knows about it: see [`ReleaseOptions`].
    ///
    /// The default ignores the options and releases normally, which is safe: the next holder
    /// may drop an in-memory conversation that was still current, never keep a stale one.
    async fn release_turn_with(&self, grant: &TurnGrant, options: &ReleaseOptions) -> Result<bool> {
        let _ = options;
        self.release_turn(grant).await
    }

    /// Withdraws a ticket that will not wait for its turn (its wait timed out, its message was
    /// dropped), so that the tickets behind it are not held up. A ticket already granted is
    /// released.
    async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()>;

    /// Whether the replica incarnation `incarnation` is alive: its heartbeat lease has not run
    /// out. Replicas use it to replay what a dead one journaled and never handled.
    async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        let _ = incarnation;
        Err(crate::Error::Unsupported { op: "is_alive" })
    }

    /// Renews this replica's heartbeat and every lease it holds, for `lease` from now.
    async fn heartbeat(&self, lease: Duration) -> Result<()>;

    /// Becomes leader of `name` for `lease` if no live replica is, or renews it if this one
    /// already is. `None` when another replica leads.
    async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>>;

    /// Gives up leadership. Returns `false` when it was no longer ours.
    async fn resign(&self, leadership: &Leadership) -> Result<bool>;

    /// Publishes this replica incarnation's status document, replacing the one it published
    /// before. The backend keeps it `keep` after this call, then forgets it; until then
    /// [`cluster`](Coordinator::cluster) lists it, alive or not.
    ///
    /// The document is opaque to the backend (the runtime writes JSON). Called from the
    /// heartbeat loop, never on the message path. The default fails with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        let _ = (status, keep);
        Err(crate::Error::Unsupported { op: "publish_status" })
    }

    /// A read-only view of the replicas for an operator: every incarnation whose status
    /// document is still kept (alive or not), and for each name of `leaderships` that has a
    /// holder, its holder; names without one are left out. It changes nothing on the backend.
    ///
    /// The default fails with [`Error::Unsupported`](crate::Error::Unsupported).
    async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        let _ = leaderships;
        Err(crate::Error::Unsupported { op: "cluster" })
    }
}

/// A shared coordinator is a coordinator: keep an `Arc` of yours (to crash or stall a test
/// coordinator, say) and hand a clone of it to the runtime. Every method is forwarded,
/// defaults included, so an implementation's overrides are the ones called.
#[async_trait]
impl<C: Coordinator + ?Sized> Coordinator for std::sync::Arc<C> {
    fn replica_id(&self) -> &str {
        (**self).replica_id()
    }

    fn incarnation(&self) -> &str {
        (**self).incarnation()
    }

    fn lease(&self) -> Duration {
        (**self).lease()
    }

    fn subscribed(&self) -> bool {
        (**self).subscribed()
    }

    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        (**self).turn_journal()
    }

    async fn take_ticket(&self, key: &ChatKey) -> Result<Ticket> {
        (**self).take_ticket(key).await
    }

    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>> {
        (**self).take_tickets(key, count).await
    }

    async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        (**self).wait_turn(ticket, timeout).await
    }

    async fn release_turn(&self, grant: &TurnGrant) -> Result<bool> {
        (**self).release_turn(grant).await
    }

    async fn release_turn_with(&self, grant: &TurnGrant, options: &ReleaseOptions) -> Result<bool> {
        (**self).release_turn_with(grant, options).await
    }

    async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()> {
        (**self).cancel_ticket(ticket).await
    }

    async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        (**self).is_alive(incarnation).await
    }

    async fn heartbeat(&self, lease: Duration) -> Result<()> {
        (**self).heartbeat(lease).await
    }

    async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>> {
        (**self).try_lead(name, lease).await
    }

    async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        (**self).resign(leadership).await
    }

    async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        (**self).publish_status(status, keep).await
    }

    async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        (**self).cluster(leaderships).await
    }
}
