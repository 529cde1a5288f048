//! The in-process reference coordination backend: [`MemoryCoordinationHub`] holds what Redis
//! would hold, and each [`MemoryCoordinator`] is one replica's view of it.
//!
//! # Model
//!
//! - Per chat key: a queue of tickets (ordered by ticket number, each owned by an incarnation),
//!   the current holder of the turn, and the replica that held the turn last.
//! - Per incarnation: a heartbeat expiry. An incarnation is alive while its expiry is in the
//!   future; the turns and leaderships it holds have no expiry of their own.
//! - Per leadership name: the holding incarnation, its replica id and its fence.
//! - Per incarnation that published one: its status document, when it was published and until
//!   when it is kept (see [`Coordinator::publish_status`]).
//! - One fence counter and one ticket counter for the whole hub, so fences and ticket numbers
//!   keep growing per key even when idle keys are evicted and re-created.
//!
//! Dead holders are cleared, and queued tickets of dead incarnations skipped, lazily: whenever
//! an operation touches the key. Time is [`tokio::time::Instant`], so tests can run under
//! `tokio::time::pause()`.
//!
//! Kept whole: the hub's state and the one `impl Coordinator` over it are one model, read
//! side by side against the Redis scripts it stands in for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::{
    ChatKey, ClusterView, Coordinator, Error, LeaderEntry, Leadership, ReleaseOptions,
    ReplicaEntry, Result, Ticket, TurnGrant, async_trait,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::CoordinatorHarness;

/// The first pause of a turn wait between two looks at the queue, when nothing woke it.
const MIN_POLL: Duration = Duration::from_millis(5);
/// The longest pause of a turn wait between two looks at the queue; it bounds how late a
/// waiter notices a holder whose lease ran out.
const MAX_POLL: Duration = Duration::from_millis(100);
/// Stands in for "never" when a caller's duration does not fit in an [`Instant`].
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// `now + d`, saturated to a far future instead of overflowing.
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).or_else(|| now.checked_add(FAR_FUTURE)).unwrap_or(now)
}

/// The shared coordination state of a group of in-process replicas, as Redis would hold it.
///
/// Give a clone to every [`MemoryCoordinator`] that should coordinate with the others: clones
/// share one state. Idle chats (no queued ticket, no holder, and no conversation waiting in the
/// memory of their last holder: see [`ReleaseOptions::retain`]) are kept up to
/// [`with_max_idle_keys`](Self::with_max_idle_keys), least recently used evicted first; a
/// re-created chat reports no previous holder, and its fences keep growing.
///
/// Every operation is O(log n) in the number of keys, tickets of the key and idle keys.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
/// use botmesh_traits::{ChatKey, Coordinator};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> botmesh_traits::Result<()> {
/// let hub = MemoryCoordinationHub::new();
/// let a = MemoryCoordinator::new(hub.clone(), "a");
/// let b = MemoryCoordinator::new(hub.clone(), "b");
///
/// let chat = ChatKey::from("chat:1");
/// let first = a.take_ticket(&chat).await?;
/// let turn = first.grant.clone().expect("a free chat grants the turn with the ticket");
/// let second = b.take_ticket(&chat).await?;
/// assert!(second.grant.is_none(), "a holds the turn");
///
/// a.release_turn(&turn).await?;
/// let next = b.wait_turn(&second, Duration::from_secs(1)).await?;
/// assert_eq!(next.previous_holder.as_deref(), Some("a"));
/// assert!(next.fence > turn.fence);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryCoordinationHub {
    state: Arc<Mutex<HubState>>,
}

impl MemoryCoordinationHub {
    /// How many idle chats a hub keeps by default.
    pub const DEFAULT_MAX_IDLE_KEYS: usize = 10_000;

    /// An empty hub that keeps at most
    /// [`DEFAULT_MAX_IDLE_KEYS`](Self::DEFAULT_MAX_IDLE_KEYS) idle chats.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty hub that keeps at most `max_idle_keys` idle chats (0 evicts a chat as soon as
    /// it is idle).
    pub fn with_max_idle_keys(max_idle_keys: usize) -> Self {
        let hub = Self::default();
        hub.lock().max_idle_keys = max_idle_keys;
        hub
    }

    /// How many chat keys the hub holds state for, idle or not.
    pub fn key_count(&self) -> usize {
        self.lock().keys.len()
    }

    /// How many chat keys are idle: no queued ticket, no holder, no conversation waiting.
    pub fn idle_key_count(&self) -> usize {
        self.lock().idle.len()
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notifier of `key`, or a fresh one nobody notifies when the key is gone (the next
    /// look at the queue then reports the ticket as gone).
    fn notifier(&self, key: &str) -> Arc<Notify> {
        self.lock().keys.get(key).map_or_else(Arc::default, |k| Arc::clone(&k.changed))
    }
}

impl fmt::Debug for MemoryCoordinationHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("MemoryCoordinationHub")
            .field("keys", &state.keys.len())
            .field("idle_keys", &state.idle.len())
            .field("max_idle_keys", &state.max_idle_keys)
            .field("incarnations", &state.incarnations.len())
            .field("leaderships", &state.leaders.len())
            .field("statuses", &state.statuses.len())
            .finish_non_exhaustive()
    }
}

impl CoordinatorHarness for MemoryCoordinationHub {
    async fn replica(&self, id: &str) -> Arc<dyn Coordinator> {
        Arc::new(MemoryCoordinator::new(self.clone(), id))
    }
}

#[derive(Debug)]
struct HubState {
    max_idle_keys: usize,
    /// The last fence handed out, for turns and leaderships alike.
    fence: u64,
    /// The last ticket number handed out.
    seq: u64,
    /// The last idle tick handed out; orders `idle` from least to most recently used.
    tick: u64,
    keys: HashMap<String, KeyState>,
    /// Idle keys by the tick of their last use.
    idle: BTreeMap<u64, String>,
    /// Keys with no ticket and no holder whose last holder keeps a conversation of the chat
    /// waiting, by the end of that retention: they are not idle until then.
    retained: BTreeSet<(Instant, String)>,
    incarnations: HashMap<Arc<str>, Incarnation>,
    leaders: HashMap<String, Leader>,
    /// The status documents published, by incarnation; those past their keep are dropped by
    /// the next publish, and never listed.
    statuses: HashMap<Arc<str>, Status>,
}

impl Default for HubState {
    fn default() -> Self {
        Self {
            max_idle_keys: MemoryCoordinationHub::DEFAULT_MAX_IDLE_KEYS,
            fence: 0,
            seq: 0,
            tick: 0,
            keys: HashMap::new(),
            idle: BTreeMap::new(),
            retained: BTreeSet::new(),
            incarnations: HashMap::new(),
            leaders: HashMap::new(),
            statuses: HashMap::new(),
        }
    }
}

#[derive(Debug, Default)]
struct KeyState {
    /// Queued tickets by number, with their owning incarnation.
    queue: BTreeMap<u64, Arc<str>>,
    holder: Option<Holder>,
    /// The replica that was granted the last turn; `None` for a new or re-created key.
    last_holder: Option<String>,
    /// Incarnations passed over since the last grant, for the next one.
    passed_over: Vec<String>,
    /// Set while the key is in the hub's idle list.
    idle_tick: Option<u64>,
    /// Until when the last release asked the chat's state to be kept: a conversation of the
    /// chat waits in its holder's memory (see [`ReleaseOptions::retain`]).
    retained_until: Option<Instant>,
    /// Woken whenever the holder goes or the head of the queue moves.
    changed: Arc<Notify>,
}

#[derive(Debug)]
struct Holder {
    incarnation: Arc<str>,
    grant: TurnGrant,
}

#[derive(Debug)]
struct Incarnation {
    expires_at: Instant,
    life: Life,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Running,
    Stalled,
    Crashed,
}

#[derive(Debug)]
struct Leader {
    incarnation: Arc<str>,
    replica_id: String,
    fence: u64,
}

/// A status document, as [`Coordinator::publish_status`] left it.
#[derive(Debug)]
struct Status {
    replica_id: String,
    document: String,
    published: Instant,
    /// The end of its keep: listed while it is in the future.
    until: Instant,
}

/// Who is calling: a coordinator's identity as the hub sees it.
#[derive(Debug)]
struct Me {
    incarnation: Arc<str>,
    replica_id: String,
    /// The coordinator's lease: an incarnation first seen by a call other than a heartbeat or
    /// a campaign (which give their own) is alive this long.
    lease: Duration,
}

fn alive(incarnations: &HashMap<Arc<str>, Incarnation>, id: &str, now: Instant) -> bool {
    incarnations.get(id).is_some_and(|i| i.expires_at > now)
}

/// Whether `id` is alive as [`Coordinator::is_alive`] tells others: within its lease and not
/// crashed (a crashed incarnation's turns still wait for its lease to run out).
fn reported_alive(incarnations: &HashMap<Arc<str>, Incarnation>, id: &str, now: Instant) -> bool {
    alive(incarnations, id, now) && incarnations.get(id).is_some_and(|i| i.life != Life::Crashed)
}

fn unavailable(reason: String) -> Error {
    Error::CoordinationUnavailable { reason, source: None }
}

impl KeyState {
    /// Clears a dead holder and skips the dead owners' tickets at the head of the queue.
    /// Returns whether anything changed.
    fn tidy(&mut self, incarnations: &HashMap<Arc<str>, Incarnation>, now: Instant) -> bool {
        let mut changed = false;
        if let Some(h) = self.holder.take_if(|h| !alive(incarnations, &h.incarnation, now)) {
            self.pass_over(&h.incarnation);
            changed = true;
        }
        while let Some(entry) = self.queue.first_entry() {
            if alive(incarnations, entry.get(), now) {
                break;
            }
            let dead = entry.remove();
            self.pass_over(&dead);
            changed = true;
        }
        changed
    }

    /// Names `incarnation` in the next grant.
    fn pass_over(&mut self, incarnation: &str) {
        if !self.passed_over.iter().any(|i| i == incarnation) {
            self.passed_over.push(incarnation.to_owned());
        }
    }

    /// Whether ticket `seq` may take the turn now: nobody holds it and the ticket is first.
    fn may_grant(&self, seq: u64) -> bool {
        self.holder.is_none() && self.queue.first_key_value().is_some_and(|(s, _)| *s == seq)
    }

    /// Hands the turn to ticket `seq` of `me`, with the hub's next fence.
    fn grant(&mut self, key: &str, seq: u64, me: &Me, fence: &mut u64) -> TurnGrant {
        *fence += 1;
        self.queue.remove(&seq);
        let previous = self.last_holder.replace(me.replica_id.clone());
        let passed = std::mem::take(&mut self.passed_over);
        let grant = TurnGrant::new(key, seq, *fence, previous).with_passed_over(passed);
        self.holder =
            Some(Holder { incarnation: Arc::clone(&me.incarnation), grant: grant.clone() });
        self.changed.notify_waiters();
        grant
    }

    fn held_by(&self, me: &Me, seq: u64) -> bool {
        self.holder.as_ref().is_some_and(|h| h.incarnation == me.incarnation && h.grant.seq == seq)
    }

    /// No queued ticket and no holder.
    fn unused(&self) -> bool {
        self.queue.is_empty() && self.holder.is_none()
    }
}

impl HubState {
    /// Registers `me` on first sight, alive for `lease` (or the default), and refuses a crashed
    /// incarnation.
    fn enter(&mut self, me: &Me, now: Instant, lease: Option<Duration>) -> Result<()> {
        let inc = self.incarnations.entry(Arc::clone(&me.incarnation)).or_insert_with(|| {
            Incarnation { expires_at: after(now, lease.unwrap_or(me.lease)), life: Life::Running }
        });
        if inc.life == Life::Crashed {
            return Err(unavailable(format!(
                "replica {} (incarnation {}) has crashed",
                me.replica_id, me.incarnation
            )));
        }
        Ok(())
    }

    /// Tidies `key` and wakes its waiters when that changed anything.
    fn tidy(&mut self, key: &str, now: Instant) {
        let Self { keys, incarnations, .. } = self;
        if let Some(k) = keys.get_mut(key)
            && k.tidy(incarnations, now)
        {
            k.changed.notify_waiters();
        }
    }

    /// Records a use of `key`: moves it to the most recent end of the idle list when it is
    /// idle, or to the retained set while a conversation of the chat waits, takes it off both
    /// otherwise, and evicts the least recently used idle keys beyond the limit.
    fn touched(&mut self, key: &str, now: Instant) {
        let Some(k) = self.keys.get_mut(key) else { return };
        if let Some(tick) = k.idle_tick.take() {
            self.idle.remove(&tick);
        }
        if let Some(until) = k.retained_until {
            self.retained.remove(&(until, key.to_owned()));
        }
        if k.unused() {
            match k.retained_until.filter(|until| *until > now) {
                Some(until) => {
                    self.retained.insert((until, key.to_owned()));
                }
                None => {
                    self.tick += 1;
                    k.idle_tick = Some(self.tick);
                    self.idle.insert(self.tick, key.to_owned());
                }
            }
        }
        // Chats whose waiting conversation ran out of time become idle.
        while self.retained.first().is_some_and(|(until, _)| *until <= now) {
            let Some((_, expired)) = self.retained.pop_first() else { break };
            if let Some(k) = self.keys.get_mut(&expired)
                && k.unused()
                && k.idle_tick.is_none()
            {
                self.tick += 1;
                k.idle_tick = Some(self.tick);
                self.idle.insert(self.tick, expired);
            }
        }
        while self.idle.len() > self.max_idle_keys {
            let Some((_, evicted)) = self.idle.pop_first() else { break };
            self.keys.remove(&evicted);
        }
    }

    fn take_ticket(&mut self, me: &Me, key: &str, now: Instant) -> Result<Ticket> {
        self.enter(me, now, None)?;
        self.seq += 1;
        let seq = self.seq;
        let k = self.keys.entry(key.to_owned()).or_default();
        k.queue.insert(seq, Arc::clone(&me.incarnation));
        self.tidy(key, now);
        let grant = match self.keys.get_mut(key) {
            Some(k) if k.may_grant(seq) => Some(k.grant(key, seq, me, &mut self.fence)),
            _ => None,
        };
        self.touched(key, now);
        Ok(Ticket::new(key, seq, grant))
    }

    /// One look at `ticket`'s place: its grant when the turn is its own, `None` to keep
    /// waiting. When `expired`, a ticket that must still wait is withdrawn and the wait fails.
    fn poll_turn(
        &mut self,
        me: &Me,
        ticket: &Ticket,
        now: Instant,
        expired: Option<Duration>,
    ) -> Result<Option<TurnGrant>> {
        self.enter(me, now, None)?;
        let key = ticket.key.as_str();
        self.tidy(key, now);
        let outcome = match self.keys.get_mut(key) {
            Some(k) if k.held_by(me, ticket.seq) => Ok(k.holder.as_ref().map(|h| h.grant.clone())),
            Some(k) if k.queue.get(&ticket.seq).is_some_and(|o| *o == me.incarnation) => {
                if k.may_grant(ticket.seq) {
                    Ok(Some(k.grant(key, ticket.seq, me, &mut self.fence)))
                } else if let Some(waited) = expired {
                    k.queue.remove(&ticket.seq);
                    k.changed.notify_waiters();
                    Err(unavailable(format!(
                        "ticket {} of {key} did not get its turn within {waited:?}",
                        ticket.seq
                    )))
                } else {
                    Ok(None)
                }
            }
            _ => Err(unavailable(format!(
                "ticket {} of {key} is not queued for replica {} (incarnation {}): it was \
                 cancelled, timed out, or skipped after this replica's lease expired",
                ticket.seq, me.replica_id, me.incarnation
            ))),
        };
        self.touched(key, now);
        outcome
    }

    fn release_turn(
        &mut self,
        me: &Me,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        now: Instant,
    ) -> Result<bool> {
        self.enter(me, now, None)?;
        let key = grant.key.as_str();
        self.tidy(key, now);
        let released = match self.keys.get_mut(key) {
            Some(k) if k.held_by(me, grant.seq) => {
                k.holder = None;
                if options.hand_back {
                    // Whoever this turn was told about is passed on to the next grant too.
                    k.pass_over(&me.incarnation);
                    for other in &grant.passed_over {
                        k.pass_over(other);
                    }
                }
                if !options.used {
                    // Nothing happened under this turn: the holder before it is still the
                    // last one that acted.
                    k.last_holder.clone_from(&grant.previous_holder);
                }
                // A conversation waits in the holder's memory: the chat is not idle while it
                // may still answer, as Redis keeps the chat's state that long.
                k.retained_until = options.retain.map(|retain| after(now, retain));
                k.changed.notify_waiters();
                true
            }
            _ => false,
        };
        self.touched(key, now);
        Ok(released)
    }

    fn cancel_ticket(&mut self, me: &Me, ticket: &Ticket, now: Instant) -> Result<()> {
        self.enter(me, now, None)?;
        let key = ticket.key.as_str();
        self.tidy(key, now);
        if let Some(k) = self.keys.get_mut(key) {
            if k.queue.get(&ticket.seq).is_some_and(|o| *o == me.incarnation) {
                k.queue.remove(&ticket.seq);
                k.pass_over(&me.incarnation);
                k.changed.notify_waiters();
            } else if k.held_by(me, ticket.seq) {
                // Nothing ran under the turn, so nobody took over what its grant passed over:
                // the next grant names them again.
                if let Some(holder) = k.holder.take() {
                    for other in &holder.grant.passed_over {
                        k.pass_over(other);
                    }
                }
                k.pass_over(&me.incarnation);
                k.changed.notify_waiters();
            }
        }
        self.touched(key, now);
        Ok(())
    }

    fn heartbeat(&mut self, me: &Me, lease: Duration, now: Instant) -> Result<()> {
        self.enter(me, now, Some(lease))?;
        let Some(inc) = self.incarnations.get_mut(&me.incarnation) else {
            return Err(unavailable(format!("replica {} is not registered", me.replica_id)));
        };
        if inc.life == Life::Stalled {
            return Err(unavailable(format!(
                "replica {} is stalled and cannot renew its heartbeat",
                me.replica_id
            )));
        }
        inc.expires_at = after(now, lease);
        Ok(())
    }

    fn try_lead(
        &mut self,
        me: &Me,
        name: &str,
        lease: Duration,
        now: Instant,
    ) -> Result<Option<Leadership>> {
        self.enter(me, now, Some(lease))?;
        if !alive(&self.incarnations, &me.incarnation, now) {
            // Whatever it held died with its lease; it cannot lead until it heartbeats again.
            return Ok(None);
        }
        match self.leaders.get(name) {
            Some(l) if l.incarnation == me.incarnation => {
                return Ok(Some(Leadership::new(name, l.fence)));
            }
            Some(l) if alive(&self.incarnations, &l.incarnation, now) => return Ok(None),
            _ => {}
        }
        self.fence += 1;
        let fence = self.fence;
        let leader = Leader {
            incarnation: Arc::clone(&me.incarnation),
            replica_id: me.replica_id.clone(),
            fence,
        };
        self.leaders.insert(name.to_owned(), leader);
        Ok(Some(Leadership::new(name, fence)))
    }

    fn resign(&mut self, me: &Me, leadership: &Leadership, now: Instant) -> Result<bool> {
        self.enter(me, now, None)?;
        let ours = self
            .leaders
            .get(&leadership.name)
            .is_some_and(|l| l.incarnation == me.incarnation && l.fence == leadership.fence);
        if ours {
            self.leaders.remove(&leadership.name);
        }
        Ok(ours)
    }

    /// Refuses a crashed incarnation, without registering one never seen.
    fn refuse_crashed(&self, me: &Me) -> Result<()> {
        match self.incarnations.get(&me.incarnation) {
            Some(i) if i.life == Life::Crashed => Err(unavailable(format!(
                "replica {} (incarnation {}) has crashed",
                me.replica_id, me.incarnation
            ))),
            _ => Ok(()),
        }
    }

    /// Replaces `me`'s status document, kept `keep` from `now`, and drops the documents whose
    /// keep ran out. Like Redis, it does not register the incarnation: only its heartbeat does.
    fn publish_status(
        &mut self,
        me: &Me,
        document: &str,
        keep: Duration,
        now: Instant,
    ) -> Result<()> {
        self.refuse_crashed(me)?;
        self.statuses.retain(|_, s| s.until > now);
        let status = Status {
            replica_id: me.replica_id.clone(),
            document: document.to_owned(),
            published: now,
            until: after(now, keep),
        };
        self.statuses.insert(Arc::clone(&me.incarnation), status);
        Ok(())
    }

    /// The kept documents and the holders of `leaderships`; changes nothing.
    fn cluster(&self, me: &Me, leaderships: &[String], now: Instant) -> Result<ClusterView> {
        self.refuse_crashed(me)?;
        let replicas = self
            .statuses
            .iter()
            .filter(|(_, s)| s.until > now)
            .map(|(inc, s)| {
                ReplicaEntry::new(
                    s.replica_id.clone(),
                    inc.as_ref(),
                    reported_alive(&self.incarnations, inc, now),
                    now.saturating_duration_since(s.published),
                    s.document.clone(),
                )
            })
            .collect();
        let leaders = leaderships
            .iter()
            .filter_map(|name| {
                let l = self.leaders.get(name)?;
                Some(LeaderEntry::new(
                    name.clone(),
                    l.replica_id.clone(),
                    l.incarnation.as_ref(),
                    l.fence,
                    reported_alive(&self.incarnations, &l.incarnation, now),
                ))
            })
            .collect();
        Ok(ClusterView::new(replicas, leaders))
    }

    fn set_life(&mut self, me: &Me, life: Life, now: Instant) {
        let inc = self.incarnations.entry(Arc::clone(&me.incarnation)).or_insert_with(|| {
            Incarnation {
                // A replica that crashes before its first call holds nothing worth keeping.
                expires_at: if life == Life::Crashed { now } else { after(now, me.lease) },
                life: Life::Running,
            }
        });
        if inc.life != Life::Crashed {
            inc.life = life;
        }
    }
}

/// One replica's coordinator on a [`MemoryCoordinationHub`]: the in-process stand-in for a
/// Redis coordinator.
///
/// Each instance is a new incarnation (a random nonce), so two coordinators with the same
/// replica id never share tickets, turns or leaderships, like a replica restarted with the same
/// id. [`crash`](Self::crash) and [`set_stalled`](Self::set_stalled) simulate the two ways a
/// replica stops renewing its lease.
#[derive(Debug)]
#[must_use = "a coordinator does nothing until given to `CoordinationConfig::new`"]
pub struct MemoryCoordinator {
    hub: MemoryCoordinationHub,
    me: Me,
}

impl MemoryCoordinator {
    /// A coordinator for replica `replica_id` on `hub`, with a fresh incarnation.
    ///
    /// Its lease is [`DEFAULT_LEASE`](botmesh_traits::DEFAULT_LEASE) until
    /// [`with_lease`](Self::with_lease) sets it. The incarnation is registered by its first
    /// call, alive for the lease that call gives ([`heartbeat`](Coordinator::heartbeat),
    /// [`try_lead`](Coordinator::try_lead)) or this lease.
    pub fn new(hub: MemoryCoordinationHub, replica_id: impl Into<String>) -> Self {
        let incarnation: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let lease = botmesh_traits::DEFAULT_LEASE;
        Self { hub, me: Me { incarnation, replica_id: replica_id.into(), lease } }
    }

    /// Sets this replica's heartbeat lease, which the coordination runtime takes from here.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.me.lease = lease;
        self
    }

    /// Simulates the replica's process dying: from now on every call fails with
    /// [`Error::CoordinationUnavailable`] (a waiting [`wait_turn`](Coordinator::wait_turn)
    /// too), no heartbeat renews its lease and nothing it holds is released. Its turns and
    /// leaderships stay until its lease runs out; then other replicas take over and its queued
    /// tickets are skipped. A crash cannot be undone.
    pub fn crash(&self) {
        self.hub.lock().set_life(&self.me, Life::Crashed, Instant::now());
    }

    /// Simulates a replica whose event loop runs but cannot renew its lease (a lost network, a
    /// backend that refuses it): while stalled, [`heartbeat`](Coordinator::heartbeat) fails with
    /// [`Error::CoordinationUnavailable`] and the lease runs down; every other call still works.
    /// Has no effect after [`crash`](Self::crash).
    pub fn set_stalled(&self, stalled: bool) {
        let life = if stalled { Life::Stalled } else { Life::Running };
        self.hub.lock().set_life(&self.me, life, Instant::now());
    }
}

#[async_trait]
impl Coordinator for MemoryCoordinator {
    fn replica_id(&self) -> &str {
        &self.me.replica_id
    }

    fn incarnation(&self) -> &str {
        &self.me.incarnation
    }

    fn lease(&self) -> Duration {
        self.me.lease
    }

    async fn take_ticket(&self, key: &ChatKey) -> Result<Ticket> {
        self.hub.lock().take_ticket(&self.me, key.as_str(), Instant::now())
    }

    /// Returns at once with `ticket.grant` when the ticket came with its turn. Otherwise waits,
    /// woken when the key's holder or queue changes and looking again every 5 ms to 100 ms
    /// (doubling) to notice a holder whose lease ran out. On timeout the ticket is withdrawn.
    /// A ticket that is no longer queued for this incarnation fails at once.
    async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        let start = Instant::now();
        if let Some(grant) = &ticket.grant {
            self.hub.lock().enter(&self.me, start, None)?;
            return Ok(grant.clone());
        }
        let deadline = start.checked_add(timeout);
        let changed = self.hub.notifier(ticket.key.as_str());
        let mut pause = MIN_POLL;
        loop {
            // Listen before looking, so a change between the look and the sleep still wakes us.
            let mut notified = pin!(changed.notified());
            notified.as_mut().enable();
            let now = Instant::now();
            let expired = deadline.is_some_and(|d| now >= d).then_some(timeout);
            if let Some(grant) = self.hub.lock().poll_turn(&self.me, ticket, now, expired)? {
                return Ok(grant);
            }
            let wake = after(now, pause);
            let wake = deadline.map_or(wake, |d| d.min(wake));
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(wake) => {}
            }
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    async fn release_turn(&self, grant: &TurnGrant) -> Result<bool> {
        self.hub.lock().release_turn(&self.me, grant, &ReleaseOptions::used(), Instant::now())
    }

    /// A release with `retain` keeps the chat out of the idle list (and so from eviction) for
    /// that long.
    async fn release_turn_with(&self, grant: &TurnGrant, options: &ReleaseOptions) -> Result<bool> {
        self.hub.lock().release_turn(&self.me, grant, options, Instant::now())
    }

    async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()> {
        self.hub.lock().cancel_ticket(&self.me, ticket, Instant::now())
    }

    async fn heartbeat(&self, lease: Duration) -> Result<()> {
        self.hub.lock().heartbeat(&self.me, lease, Instant::now())
    }

    async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        Ok(reported_alive(&self.hub.lock().incarnations, incarnation, Instant::now()))
    }

    async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>> {
        self.hub.lock().try_lead(&self.me, name, lease, Instant::now())
    }

    async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        self.hub.lock().resign(&self.me, leadership, Instant::now())
    }

    /// Keeps the document until `keep` from now. A crashed replica cannot publish.
    async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        self.hub.lock().publish_status(&self.me, status, keep, Instant::now())
    }

    /// An entry is alive as [`is_alive`](Coordinator::is_alive) says: a
    /// [crashed](MemoryCoordinator::crash) replica is listed dead at once, and until its
    /// document's keep runs out.
    async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        self.hub.lock().cluster(&self.me, leaderships, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_crashed_replica_is_listed_dead_until_its_status_keep_runs_out() {
        let hub = MemoryCoordinationHub::new();
        let a = MemoryCoordinator::new(hub.clone(), "a");
        let b = MemoryCoordinator::new(hub.clone(), "b");
        a.heartbeat(Duration::from_secs(60)).await.unwrap();
        b.heartbeat(Duration::from_secs(60)).await.unwrap();
        a.publish_status("{}", Duration::from_secs(10)).await.unwrap();
        let lead = a.try_lead("provider:x", Duration::from_secs(60)).await.unwrap().unwrap();
        let names = ["provider:x".to_owned()];

        a.crash();
        assert!(a.publish_status("{}", Duration::from_secs(10)).await.is_err());
        assert!(a.cluster(&names).await.is_err(), "a crashed replica cannot read either");
        tokio::time::sleep(Duration::from_secs(9)).await;
        let view = b.cluster(&names).await.unwrap();
        let entry = view.replica(a.incarnation()).unwrap();
        assert!(!entry.alive, "a crashed replica is dead as is_alive says, within its lease");
        assert_eq!(entry.age, Duration::from_secs(9));
        let expected = LeaderEntry::new("provider:x", "a", a.incarnation(), lead.fence, false);
        assert_eq!(view.leaders, [expected]);

        tokio::time::sleep(Duration::from_secs(1)).await;
        let view = b.cluster(&names).await.unwrap();
        assert!(view.replicas.is_empty(), "its document is forgotten when its keep runs out");
        assert_eq!(view.leaders.len(), 1, "it keeps its leadership until another replica takes it");
    }
}
