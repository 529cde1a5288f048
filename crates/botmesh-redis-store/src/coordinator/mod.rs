//! [`RedisCoordinator`]: tickets, turns, heartbeats and leadership on Redis.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::{
    BoxError, ChatKey, ClusterView, Coordinator, Error, Leadership, ReleaseOptions, Result, Ticket,
    TurnGrant, TurnJournal, async_trait,
};
use futures_util::future::join_all;
use tokio::task::JoinHandle;

use crate::batch::{Batcher, Reply};
use crate::call::ScriptCall;
use crate::conn::{Conn, Connect, Source, idempotent, ms};
use crate::keys::Keys;
use crate::replicas;
use crate::scripts;
use crate::{RedisOptions, RedisStore};

mod batch;
mod journal;
mod reclaim;
mod runs;
mod view;
mod wait;
mod wake;
mod watch;
mod withdraw;

use self::batch::{JournalKeys, Op, Turns};
use self::reclaim::Reclaim;
use self::runs::{Release, Runs};
use self::wake::{Waiters, passed_over, subscriber};
use self::watch::Watch;
use self::withdraw::{Withdraw, Withdrawals};

fn unavailable(reason: &str, e: impl Into<BoxError>) -> Error {
    Error::CoordinationUnavailable { reason: reason.to_owned(), source: Some(e.into()) }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A [`Coordinator`] on Redis.
///
/// - An uncontended message takes its ticket and its turn in one script call and gives the
///   turn back in one. Tickets and releases asked for while earlier ones are on the wire go
///   together, whatever their chats: one script call per batch (per shard in the cluster
///   layout).
/// - A turn whose chat's next ticket is this incarnation's own passes to it here, without a
///   round trip, while the liveness key is known to be alive (see `runs.rs`); other replicas
///   see the turn held all along, and one release ends the run.
/// - A waiting ticket is woken by Redis: the release that hands it the turn publishes the
///   grant on the waiting incarnation's channel. A holder that dies announces nothing: the
///   incarnations waited behind are watched, one liveness read per incarnation when its key
///   would run out, and their waiters look again when one is gone. A waiter polls only while
///   the channel is down (from 5 ms, doubling to `max_poll`), and otherwise once per lease as
///   a safety net.
/// - A replica's liveness is one key with a time to live (one per shard in the cluster
///   layout); a heartbeat is one `SET ... PX` per such key, whatever the number of chats held.
///   Turns and leaderships held by an incarnation whose key expired are taken back, and its
///   queued tickets skipped, by the next script that touches the chat.
/// - A status document is one script to publish (the document, its index entry, the trim of
///   documents whose keep ended, by the server's clock). The cluster view is one script in the
///   standalone layout; in the cluster layout, one round of scripts (the status tag, and each
///   leadership's shard) and one round of liveness checks, each round's commands concurrent.
/// - Through Sentinel, each move of the master is followed by one look over the chats' turn
///   states for turns and tickets the promoted replica still records as this incarnation's
///   though it gave them up (a release or withdrawal that did not reach the replica); they
///   are withdrawn, so that a live replica never holds a chat up (see `reclaim.rs`).
#[must_use = "a coordinator does nothing until given to `CoordinationConfig::new`"]
pub struct RedisCoordinator {
    conn: Conn,
    keys: Keys,
    replica_id: String,
    incarnation: String,
    lease: Duration,
    max_poll: Duration,
    idle_keep: Duration,
    waiters: Arc<Waiters>,
    subscriber: JoinHandle<()>,
    /// Takes tickets and releases turns in batches; made by the first call, once the replica
    /// id and lease are set.
    batcher: std::sync::OnceLock<Batcher<Turns>>,
    /// Runs of a chat's own consecutive tickets, whose turn passes without a round trip.
    runs: Arc<Runs>,
    /// The incarnations waited behind.
    watch: Arc<Watch>,
    watching: JoinHandle<()>,
    /// Withdraws tickets nobody will wait for, retrying until Redis answers.
    withdrawals: Withdrawals,
    withdrawer: JoinHandle<()>,
    /// Gives back what a failover handed back (see `reclaim.rs`): started with the first
    /// batch, through Sentinel only.
    reclaimer: std::sync::OnceLock<JoinHandle<()>>,
    /// Whether a heartbeat registered this incarnation: a later one that finds it gone knows
    /// its leases expired meanwhile.
    registered: std::sync::atomic::AtomicBool,
    /// A connection of its own for heartbeats, so renewals never queue behind message traffic.
    heartbeat_conn: tokio::sync::OnceCell<Conn>,
    /// Where the heartbeat connection comes from.
    source: Source,
    /// How to open the heartbeat connection, and the replicas grants wait for.
    connect: Connect,
    /// The store whose journal this coordinator writes with its tickets and releases, when
    /// it was made by one in the standalone layout.
    journal: Option<RedisStore>,
}

impl std::fmt::Debug for RedisCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCoordinator")
            .field("replica_id", &self.replica_id)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisCoordinator {
    fn drop(&mut self) {
        self.subscriber.abort();
        self.withdrawer.abort();
        self.watching.abort();
        if let Some(reclaimer) = self.reclaimer.get() {
            reclaimer.abort();
        }
    }
}

impl RedisCoordinator {
    /// Connects on its own connection to one Redis server, or through Sentinel with a
    /// `redis+sentinel://` URL (see [`RedisOptions`]).
    pub async fn new(url: &str, prefix: &str) -> Result<Self> {
        Self::connect(RedisOptions::new(url, prefix)).await
    }

    /// Connects with full options. The lease is [`DEFAULT_LEASE`](botmesh_traits::DEFAULT_LEASE)
    /// until [`with_lease`](Self::with_lease) sets it.
    pub async fn connect(options: RedisOptions) -> Result<Self> {
        let (conn, source) = Connect::from(&options).open().await?;
        scripts::preload(&conn, &scripts::COORDINATION).await;
        let keys = Keys::new(&options.prefix, options.layout);
        Ok(Self::from_parts(conn, source, keys, &options, botmesh_traits::DEFAULT_LEASE, None))
    }

    /// Sets this replica's heartbeat lease: the takeover time after a crash, and how long a
    /// replica may freeze before it gives its chats up. The coordination runtime takes it from
    /// here.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub(crate) fn from_parts(
        conn: Conn,
        source: Source,
        keys: Keys,
        options: &RedisOptions,
        lease: Duration,
        journal: Option<RedisStore>,
    ) -> Self {
        let keys = keys.coordination();
        // Waiting for replicas, a turn handed over is taken only from a look of the waiter's
        // own, which waits for them (see `Waiters::confirm`).
        let waiters = Arc::new(Waiters::confirming(options.replicas.is_some()));
        let incarnation = uuid::Uuid::new_v4().simple().to_string();
        let channel = format!("{}{incarnation}", keys.wake_prefix());
        let subscriber = tokio::spawn(subscriber(source.clone(), channel, Arc::clone(&waiters)));
        let withdrawals = Withdrawals {
            conn: conn.clone(),
            keys: keys.clone(),
            incarnation: incarnation.clone(),
            idle_keep: options.idle_keep,
            waiters: Arc::clone(&waiters),
            pending: Arc::default(),
            queued: Arc::default(),
        };
        let withdrawer = tokio::spawn(withdrawals.clone().run());
        let watch = Arc::new(Watch::default());
        let watching = tokio::spawn(Arc::clone(&watch).run(conn.clone(), keys.clone()));
        Self {
            conn,
            keys,
            replica_id: uuid::Uuid::new_v4().to_string(),
            incarnation,
            lease,
            max_poll: options.max_poll,
            idle_keep: options.idle_keep,
            waiters,
            subscriber,
            batcher: std::sync::OnceLock::new(),
            runs: Arc::default(),
            watch,
            watching,
            withdrawals,
            withdrawer,
            reclaimer: std::sync::OnceLock::new(),
            registered: std::sync::atomic::AtomicBool::new(false),
            heartbeat_conn: tokio::sync::OnceCell::new(),
            source,
            connect: Connect::from(options),
            journal,
        }
    }

    /// The heartbeat connection, opened on first use.
    async fn heartbeat_conn(&self) -> Result<Conn> {
        self.heartbeat_conn.get_or_try_init(|| self.connect.open_own(&self.source)).await.cloned()
    }

    /// Sets the replica id (unique among running replicas; a pod or host name is fine).
    /// Defaults to a random UUID.
    pub fn with_replica_id(mut self, id: impl Into<String>) -> Self {
        self.replica_id = id.into();
        self
    }

    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Runs `op` in the next batch of takes and releases.
    async fn batched(&self, op: Op) -> Reply {
        let batcher = self.batcher.get_or_init(|| {
            self.start_reclaim();
            Batcher::new(Turns {
                conn: self.conn(),
                keys: self.keys.clone(),
                script: scripts::TURNS.get(),
                incarnation: self.incarnation.clone(),
                replica_id: self.replica_id.clone(),
                lease_ms: ms(self.lease),
                journal: self.journal.as_ref().map(|store| JournalKeys::new(&store.keys)),
                replicas: self.connect.replicas,
            })
        });
        batcher.call(op).await
    }

    /// Starts giving back what a failover hands back (see `reclaim.rs`), when the master can
    /// move: through Sentinel, whose layout is standalone.
    fn start_reclaim(&self) {
        let Some(moved) = self.source.moved() else { return };
        if self.keys.layout() != crate::KeyLayout::Standalone {
            return;
        }
        let reclaim = Reclaim {
            conn: self.conn(),
            keys: self.keys.clone(),
            incarnation: self.incarnation.clone(),
            runs: Arc::clone(&self.runs),
            withdrawals: self.withdrawals.clone(),
            settle: self.connect.settle(),
        };
        let _ = self.reclaimer.set(tokio::spawn(reclaim.run(moved)));
    }

    /// Sends `op`, a take of tickets of `key` for the call `tid` (`what` it does, for its
    /// error), and returns its reply.
    async fn take(&self, op: Op, key: &ChatKey, tid: String, what: &str) -> Result<Vec<String>> {
        match self.batched(op).await {
            Ok(reply) => Ok(reply),
            Err(e) => {
                // The script may have run with its reply lost, or not reached enough replicas
                // in time: withdraw whatever it queued, and give back a turn it was granted.
                let _ = self
                    .withdrawals
                    .now_or_later(Withdraw::Orphans { key: key.clone(), tid })
                    .await;
                Err(unavailable(what, e))
            }
        }
    }

    /// The `count` tickets of `key` a take's `reply` names, with the turn when it came along;
    /// notes them for the runs and the waiters.
    fn tickets(&self, key: &ChatKey, count: usize, reply: &[String]) -> Result<Vec<Ticket>> {
        if reply.len() != count + 5 {
            return Err(Error::corrupt("take_tickets reply", format!("{reply:?}")));
        }
        let (seqs, rest) = reply.split_at(count);
        let mut granted = match rest {
            [seq, fence, prev, passed, _] if !seq.is_empty() => {
                Some(Self::grant(key, seq, fence, prev, passed)?)
            }
            _ => None,
        };
        let holder = rest.get(4).filter(|h| !h.is_empty());
        let mut tickets = Vec::with_capacity(count);
        for seq in seqs {
            let seq = seq.parse::<u64>().map_err(|e| Error::corrupt("ticket", e))?;
            // Moved to the ticket it names, so no ticket's grant is a copy.
            let grant = granted.take_if(|g| g.seq == seq);
            if grant.is_none()
                && let Some(holder) = holder
            {
                lock(&self.waiters.holders).insert((key.clone(), seq), holder.clone());
            }
            tickets.push(Ticket::new(key.clone(), seq, grant));
        }
        self.runs.taken(key, tickets.iter().filter(|t| t.grant.is_none()).map(|t| t.seq));
        if let Some(ticket) = tickets.iter().find(|t| t.grant.is_some()) {
            self.runs.holds(key, ticket.seq);
        }
        if let Some(grant) = granted {
            // None of these tickets: the turn went to an older ticket of ours, still waiting.
            lock(&self.waiters.granted).insert((key.clone(), grant.seq), grant);
            self.waiters.wake(key);
        }
        Ok(tickets)
    }

    fn grant(key: &ChatKey, seq: &str, fence: &str, prev: &str, passed: &str) -> Result<TurnGrant> {
        let parse = |what: &str, s: &str| {
            s.parse::<u64>().map_err(|e| Error::corrupt(format!("{what} {s:?}"), e))
        };
        let previous = (!prev.is_empty()).then(|| prev.to_owned());
        Ok(TurnGrant::new(key.clone(), parse("ticket", seq)?, parse("fence", fence)?, previous)
            .with_passed_over(passed_over(passed)))
    }

    /// Gives `grant`'s turn back, acknowledging journaled message `ack` in the same call (only
    /// with a journal: see `journal.rs`).
    async fn release(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        ack: Option<&str>,
    ) -> Result<bool> {
        // A hand-over message that arrived after the turn was found by polling is stale now.
        self.waiters.forget(&grant.key, grant.seq);
        let may_pass = ack.is_none();
        match self.runs.release(grant, options, &self.replica_id, self.lease, may_pass) {
            Release::Passed(next) => {
                lock(&self.waiters.granted).insert((next.key.clone(), next.seq), next);
                self.waiters.wake(&grant.key);
                Ok(true)
            }
            Release::Redis { held, through } => {
                let keep = options.retain.map_or(self.idle_keep, |r| r.max(self.idle_keep));
                let reply = self
                    .batched(Op::Release {
                        key: grant.key.clone(),
                        seq: held,
                        through,
                        // Within a run, the turns before this one were used.
                        used: options.used || held != through,
                        keep_ms: ms(keep),
                        hand_back: options.hand_back,
                        ack: ack.map(str::to_owned),
                    })
                    .await
                    .map_err(|e| unavailable("releasing a turn", e))?;
                self.runs.released(&grant.key, through);
                self.waiters.deliver(&grant.key, reply.get(1..).unwrap_or_default());
                Ok(reply.first().is_some_and(|ok| ok == "1"))
            }
        }
    }
}

#[async_trait]
impl Coordinator for RedisCoordinator {
    fn replica_id(&self) -> &str {
        &self.replica_id
    }

    fn incarnation(&self) -> &str {
        &self.incarnation
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn subscribed(&self) -> bool {
        self.waiters.subscribed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        self.journal.as_ref().map(|_| self as &dyn TurnJournal)
    }

    async fn take_ticket(&self, key: &ChatKey) -> Result<Ticket> {
        self.take_tickets(key, 1)
            .await?
            .pop()
            .ok_or_else(|| Error::corrupt("take_tickets reply", "no ticket"))
    }

    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let tid = uuid::Uuid::new_v4().simple().to_string();
        let op = Op::Take { key: key.clone(), count, tid: tid.clone() };
        let reply = self.take(op, key, tid, "taking a ticket").await?;
        self.tickets(key, count, &reply)
    }

    async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        let waited = self.wait(ticket, timeout).await;
        match &waited {
            Ok(grant) => self.runs.holds(&grant.key, grant.seq),
            Err(_) => self.runs.ended(&ticket.key, ticket.seq),
        }
        waited
    }

    async fn release_turn(&self, grant: &TurnGrant) -> Result<bool> {
        self.release(grant, &ReleaseOptions::used(), None).await
    }

    async fn release_turn_with(&self, grant: &TurnGrant, options: &ReleaseOptions) -> Result<bool> {
        self.release(grant, options, None).await
    }

    async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()> {
        let id = (ticket.key.clone(), ticket.seq);
        let unclaimed = || lock(&self.waiters.granted).remove(&id).is_some();
        let what = match self.runs.withdrawn(&ticket.key, ticket.seq, unclaimed) {
            // The turn had passed to this ticket within a run: the run ends in Redis, the
            // ticket's message handed on as a withdrawn one is.
            Some(held) => {
                self.runs.released(&ticket.key, ticket.seq);
                Withdraw::Run { key: ticket.key.clone(), held, through: ticket.seq }
            }
            None => Withdraw::Ticket(ticket.clone()),
        };
        // A cancel Redis did not confirm is retried until it is: the ticket must not stay
        // queued (or hold the turn) with nobody waiting for it.
        self.withdrawals.now_or_later(what).await.map_err(|e| unavailable("cancelling a ticket", e))
    }

    /// One `EXISTS` on the incarnation's liveness key, in the shard its id maps to (a heartbeat
    /// renews the key in every shard at once).
    async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        let tag = self.keys.shard(incarnation);
        let key = &format!("{}{incarnation}", Keys::alive_prefix(&tag));
        let n: i64 = idempotent(|| async move {
            redis::cmd("EXISTS").arg(key).query_async(&mut self.conn()).await
        })
        .await
        .map_err(|e| unavailable("checking a replica's heartbeat", e))?;
        Ok(n == 1)
    }

    /// Waiting for replicas, a renewal counts once they have it: a promoted replica keeps the
    /// liveness key as long as the holder believes.
    async fn heartbeat(&self, lease: Duration) -> Result<()> {
        let conn = self.heartbeat_conn().await?;
        let replicas = self.connect.replicas;
        let sets = self.keys.shards().into_iter().map(|tag| {
            let mut conn = conn.clone();
            let key = format!("{}{}", Keys::alive_prefix(&tag), self.incarnation);
            async move {
                let mut set = redis::cmd("SET");
                set.arg(key).arg(1).arg("PX").arg(ms(lease)).arg("GET");
                replicas::command::<Option<String>>(&set, &mut conn, replicas).await
            }
        });
        let started = tokio::time::Instant::now();
        let mut expired = false;
        for result in join_all(sets).await {
            expired |= result.map_err(|e| unavailable("renewing the heartbeat", e))?.is_none();
        }
        let was_registered = self.registered.swap(true, std::sync::atomic::Ordering::SeqCst);
        if expired && was_registered {
            // Renewed now, but the liveness key had run out: other replicas may have taken
            // this incarnation's turns and leaderships meanwhile, so no run goes on here.
            self.runs.expired();
            return Err(Error::LeaseLost {
                key: self.incarnation.clone(),
                reason: botmesh_traits::LeaseLostReason::Expired,
            });
        }
        self.runs.renewed(started);
        Ok(())
    }

    /// Waiting for replicas, a leadership counts once they have it; a campaign that found it
    /// ours already reads it only, and the barrier (see `replicas.rs`) makes the wait cover it.
    async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>> {
        let (lead, alive) = (self.keys.lead(name), Keys::alive_prefix(&self.keys.shard(name)));
        let bytes = lead.len() + alive.len() + self.incarnation.len() + self.replica_id.len();
        let mut call = ScriptCall::new(scripts::TRY_LEAD.get(), 1, 5, bytes + 24);
        call.arg(&lead).arg(&self.incarnation).arg(&self.replica_id).arg(&alive).arg(ms(lease));
        let fence: Option<String> =
            replicas::script(&call, &mut self.conn(), self.connect.replicas)
                .await
                .map_err(|e| unavailable("campaigning", e))?;
        fence
            .map(|f| {
                let fence = f.parse::<u64>().map_err(|e| Error::corrupt("fence", e))?;
                Ok(Leadership::new(name, fence))
            })
            .transpose()
    }

    async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        let n: i64 = scripts::RESIGN
            .get()
            .key(self.keys.lead(&leadership.name))
            .arg(&self.incarnation)
            .arg(leadership.fence)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| unavailable("resigning", e))?;
        Ok(n == 1)
    }

    async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        self.publish(status, keep).await
    }

    async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        self.view(leaderships).await
    }
}
