//! A connection to the master of a Redis that Sentinel fails over: it asks the sentinels which
//! node is the master, holds a connection to it, and asks again when the master may have
//! moved.
//!
//! The master may move in three ways, and each makes the next command look the master up
//! again (one lookup for every connection waiting, the first one's):
//!
//! - **A failover is announced.** A task listens to one sentinel's `+switch-master` channel
//!   (the next sentinel while that one is unreachable) and, when the master of our name
//!   moves, bumps the epoch every connection made from the same URL checks before each
//!   command. A failover asked for with `SENTINEL FAILOVER` leaves the old master running as a
//!   master for about eight seconds before the sentinels turn it into a replica: without the
//!   announcement, writes would go on landing there, and be lost.
//! - **A node refuses as a non-master would** (`READONLY`: a replica; `MASTERDOWN`: a replica
//!   cut off from its master; `LOADING`: a node starting). Nothing of the command ran, so it
//!   is sent once more, on the master the sentinels name now, if that is another node. The
//!   epoch is bumped too: the other connections and the wake channel follow.
//! - **The connection fails** (dropped, timed out). The command may have run: it is not sent
//!   again here, the caller's policy decides (an idempotent read is sent once more, a script
//!   that grants is not, see `conn.rs`), and its next command looks the master up again.
//!
//! The lookup asks every sentinel at once and believes the one whose view of the master has
//! the highest configuration epoch (`SENTINEL MASTER`), then checks with `ROLE` that the node
//! is a master. redis-rs's own `Sentinel::async_master_for` believes the first sentinel in the
//! configured order instead: just after a failover, a sentinel that has not heard of it yet
//! names the old master, which still says it is one, and the connection would go back to it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::sentinel_url::SentinelUrl;
use super::{Connect, backoff};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sentinels' announcement of a failover: `NAME OLD-IP OLD-PORT NEW-IP NEW-PORT`.
const SWITCH_MASTER: &str = "+switch-master";

/// A connection to the master, made (and made again) through the sentinels. Clones share the
/// connection; [`sibling`](Self::sibling) makes one of its own on the same sentinels.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<Shared>,
    slot: Arc<Slot>,
}

/// What every connection made from one URL shares: how to find the master, and the epoch of
/// its place.
struct Shared {
    url: SentinelUrl,
    connect: Connect,
    sentinels: Vec<redis::Client>,
    /// Bumped whenever the master may have moved; a connection made at an older epoch is
    /// replaced before its next command, and the wake channel subscribes again.
    moved: watch::Sender<u64>,
    /// The `+switch-master` listener, ended with the last connection.
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(watcher) = lock(&self.watcher).take() {
            watcher.abort();
        }
    }
}

/// One connection's current master connection.
#[derive(Default)]
struct Slot {
    held: Mutex<Option<Held>>,
    /// Taken while looking the master up, so that the commands waiting meanwhile share one
    /// lookup.
    reconnecting: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
struct Held {
    conn: MultiplexedConnection,
    /// The epoch it was made at.
    epoch: u64,
    /// Tells it from a later connection of the same slot.
    id: u64,
    /// The master's `ip:port`.
    addr: String,
}

static IDS: AtomicU64 = AtomicU64::new(0);

/// What a reply says about the connection it came on.
enum Verdict {
    Fine,
    /// The node refused as a non-master does; the command did not run.
    Refused,
    /// The connection failed; the command may have run.
    Failed,
}

/// Whether a server error means the node is not (or no longer, or not yet) a master that
/// takes writes, and refused the command without running it.
fn refused(code: &str) -> bool {
    matches!(code, "READONLY" | "MASTERDOWN" | "LOADING")
}

impl SentinelConn {
    /// Connects to the master `url` names, through its sentinels. The error is the lookup's:
    /// [`ErrorKind::MasterNameNotFoundBySentinel`] when every sentinel that answered knows no
    /// master of that name.
    pub(crate) async fn connect(url: SentinelUrl, connect: Connect) -> RedisResult<Self> {
        let sentinels = url
            .sentinel_urls()
            .iter()
            .map(|u| connect.client(u))
            .collect::<RedisResult<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            url,
            connect,
            sentinels,
            moved: watch::Sender::new(0),
            watcher: Mutex::new(None),
        });
        let conn = Self { shared: Arc::clone(&shared), slot: Arc::default() };
        conn.connection().await?;
        let watcher = tokio::spawn(watch_switches(Arc::downgrade(&shared)));
        *lock(&shared.watcher) = Some(watcher);
        Ok(conn)
    }

    /// A connection of its own to the same master, on the same sentinels and epoch.
    pub(crate) fn sibling(&self) -> Self {
        Self { shared: Arc::clone(&self.shared), slot: Arc::default() }
    }

    /// A receiver told each time the master may have moved.
    pub(crate) fn moved(&self) -> watch::Receiver<u64> {
        self.shared.moved.subscribe()
    }

    /// A pub/sub connection to the master the sentinels name now.
    pub(crate) async fn pubsub(&self) -> RedisResult<PubSub> {
        let (ip, port) = self.shared.find().await?;
        let client = self.shared.connect.client(&self.shared.url.node_url(&ip, port))?;
        bounded(self.shared.lookup_bound(), client.get_async_pubsub()).await
    }

    /// The master connection for the current epoch, looked up when there is none.
    async fn connection(&self) -> RedisResult<Held> {
        let current = |epoch| lock(&self.slot.held).clone().filter(|h| h.epoch == epoch);
        if let Some(held) = current(*self.shared.moved.borrow()) {
            return Ok(held);
        }
        let _one = self.slot.reconnecting.lock().await;
        // Read before the lookup: a move announced during it makes the next command look again.
        let epoch = *self.shared.moved.borrow();
        if let Some(held) = current(epoch) {
            return Ok(held);
        }
        let (conn, addr) = self.shared.master().await?;
        let held = Held { conn, epoch, id: IDS.fetch_add(1, Ordering::Relaxed), addr };
        *lock(&self.slot.held) = Some(held.clone());
        Ok(held)
    }

    /// Drops the connection `held` if it is still the current one.
    fn forget(&self, held: &Held) {
        let mut current = lock(&self.slot.held);
        if current.as_ref().is_some_and(|h| h.id == held.id) {
            *current = None;
        }
    }

    /// Sends what `send` sends on the master connection, once more on another master when the
    /// node refused it as a non-master; `verdict` reads the reply.
    async fn send<'a, T>(
        &'a self,
        send: impl Fn(MultiplexedConnection) -> RedisFuture<'a, T>,
        verdict: impl Fn(&RedisResult<T>) -> Verdict,
    ) -> RedisResult<T> {
        let held = self.connection().await?;
        let reply = send(held.conn.clone()).await;
        match verdict(&reply) {
            Verdict::Fine => reply,
            Verdict::Failed => {
                self.forget(&held);
                reply
            }
            Verdict::Refused => {
                self.forget(&held);
                self.shared.bump();
                match self.connection().await {
                    // Nothing ran: the master the sentinels name now gets it.
                    Ok(again) if again.addr != held.addr => send(again.conn).await,
                    _ => reply,
                }
            }
        }
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.send(
            move |mut conn| Box::pin(async move { conn.req_packed_command(cmd).await }),
            |reply| match reply {
                Ok(Value::ServerError(e)) if refused(e.code()) => Verdict::Refused,
                Ok(_) => Verdict::Fine,
                Err(_) => Verdict::Failed,
            },
        ))
    }

    /// A pipeline is sent again only when its first command was refused as a non-master
    /// would refuse it. The pipelines of this crate are either script loads (which no node
    /// refuses) or a script call followed by the commands that wait for its replicas (see
    /// `replicas.rs`), whose first command is the only one that writes: refused, nothing of
    /// the pipeline changed anything.
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send(
            move |mut conn| {
                Box::pin(async move { conn.req_packed_commands(pipeline, offset, count).await })
            },
            |reply| match reply {
                Ok(values) => match values.first() {
                    Some(Value::ServerError(e)) if refused(e.code()) => Verdict::Refused,
                    _ => Verdict::Fine,
                },
                Err(_) => Verdict::Failed,
            },
        ))
    }

    fn get_db(&self) -> i64 {
        self.shared.url.db
    }
}

impl Shared {
    /// How long one lookup step (asking the sentinels, connecting to the master) may take.
    fn lookup_bound(&self) -> Duration {
        self.connect.connection_timeout + self.connect.response_timeout
    }

    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect.connection_timeout))
            .set_response_timeout(Some(self.connect.response_timeout))
    }

    fn bump(&self) {
        self.moved.send_modify(|epoch| *epoch += 1);
    }

    /// A connection to the master the sentinels name, checked to be a master.
    async fn master(&self) -> RedisResult<(MultiplexedConnection, String)> {
        let (ip, port) = self.find().await?;
        let client = self.connect.client(&self.url.node_url(&ip, port))?;
        let config = self.config();
        let mut conn = bounded(
            self.lookup_bound(),
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role.as_slice() == b"master" => {
                Ok((conn, format!("{ip}:{port}")))
            }
            _ => Err(RedisError::from((
                ErrorKind::Io,
                "the node the sentinels name is not a master (yet)",
                format!("{ip}:{port}"),
            ))),
        }
    }

    /// The master's address, from the sentinel whose view has the highest configuration epoch
    /// among those that answer and see it up.
    async fn find(&self) -> RedisResult<(String, u16)> {
        let bound = self.lookup_bound();
        let config = self.config();
        let asks = self.sentinels.iter().map(|sentinel| {
            let config = &config;
            bounded(bound, async move {
                let mut conn =
                    sentinel.get_multiplexed_async_connection_with_config(config).await?;
                redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(&self.url.master)
                    .query_async::<HashMap<String, String>>(&mut conn)
                    .await
            })
        });
        let (mut best, mut unknown, mut answered, mut last) = (None, 0, 0, None);
        for answer in join_all(asks).await {
            match answer {
                Ok(master) => {
                    answered += 1;
                    if let Some((epoch, ip, port)) = up(&master)
                        && best.as_ref().is_none_or(|(e, _, _)| epoch > *e)
                    {
                        best = Some((epoch, ip, port));
                    }
                }
                Err(e) if e.detail().is_some_and(|d| d.contains("No such master")) => unknown += 1,
                Err(e) => last = Some(e),
            }
        }
        if let Some((_, ip, port)) = best {
            return Ok((ip, port));
        }
        Err(match (unknown, answered, last) {
            (1.., 0, _) => RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel knows a master of that name",
                self.url.master.clone(),
            )),
            (_, 1.., _) => RedisError::from((ErrorKind::Io, "the sentinels see the master down")),
            (_, _, Some(e)) => e,
            _ => RedisError::from((ErrorKind::Io, "no sentinel answered")),
        })
    }
}

/// The epoch, ip and port of a master a sentinel sees up (`SENTINEL MASTER`'s fields). A
/// master only this sentinel takes for down (`s_down`) still counts: the `ROLE` check that
/// follows finds out, and one sentinel's view alone stops nothing; one the quorum takes for
/// down (`o_down`) is about to be failed over.
fn up(master: &HashMap<String, String>) -> Option<(u64, String, u16)> {
    let flags = master.get("flags")?;
    if !flags.split(',').any(|f| f == "master") || flags.contains("o_down") {
        return None;
    }
    let port = master.get("port")?.parse().ok()?;
    let epoch = master.get("config-epoch").and_then(|e| e.parse().ok()).unwrap_or(0);
    Some((epoch, master.get("ip")?.clone(), port))
}

/// `future`, failing as a timeout after `bound`.
async fn bounded<T>(
    bound: Duration,
    future: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(bound, future).await.unwrap_or_else(|_| {
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer from Redis or a sentinel in time",
        )))
    })
}

/// Listens to the sentinels' `+switch-master` announcements, one sentinel at a time, and
/// bumps the epoch when the master of our name moves, as long as a connection lives.
async fn watch_switches(shared: Weak<Shared>) {
    let mut waits = backoff();
    let mut next = 0usize;
    let mut first = true;
    loop {
        let subscribed = {
            let Some(shared) = shared.upgrade() else { return };
            let Some(sentinel) = shared.sentinels.get(next % shared.sentinels.len().max(1)) else {
                return;
            };
            next += 1;
            match bounded(shared.lookup_bound(), sentinel.get_async_pubsub()).await {
                Ok(mut pubsub) => match pubsub.subscribe(SWITCH_MASTER).await {
                    Ok(()) => {
                        // A failover announced while nobody listened is caught by looking
                        // again.
                        if !first {
                            shared.bump();
                        }
                        first = false;
                        Some((pubsub, shared.url.master.clone()))
                    }
                    Err(_) => None,
                },
                Err(_) => None,
            }
        };
        if let Some((pubsub, name)) = subscribed {
            waits = backoff();
            let mut messages = pubsub.into_on_message();
            while let Some(msg) = messages.next().await {
                let payload: String = msg.get_payload().unwrap_or_default();
                if payload.split(' ').next() == Some(name.as_str()) {
                    let Some(shared) = shared.upgrade() else { return };
                    tracing::info!(target: "botmesh", master = %name, "Sentinel moved the Redis master");
                    shared.bump();
                }
            }
        }
        tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(1))).await;
    }
}
