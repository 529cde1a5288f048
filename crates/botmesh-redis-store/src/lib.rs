//! Redis for botmesh: [`RedisStore`], the state every replica of a bot shares, and
//! [`RedisCoordinator`], the backend of their coordination.
//!
//! # Key design decisions
//!
//! - **Round trips are the budget.** Every read-then-write is one Lua script, atomic on the
//!   server. An uncontended message costs two coordination round trips: its ticket (which
//!   comes with the turn when the chat is free) and its release. When the chat's next ticket
//!   is the same replica's (a burst at one replica, or every message of an exclusive
//!   transport), the turn passes to it in the replica without a round trip; Redis goes on
//!   recording the run's first ticket as the holder, and one release ends a run of up to 32.
//!   A heartbeat is one command per liveness key, whatever the number of chats a replica
//!   holds.
//! - **Waiting is woken, not polled.** A release with tickets waiting grants the turn and
//!   publishes the grant on the waiting incarnation's channel; each coordinator holds one
//!   subscription and wakes its local waiters. A holder that dies is noticed by a watch of
//!   the incarnations waited behind (one liveness read per incarnation when its key would run
//!   out). A waiter asks Redis on its own once per lease while subscribed, and polls (5 ms,
//!   doubling up to `max_poll`) only while the subscription is down.
//! - **Calls go in batches.** Tickets and releases of many chats, and the journal's appends,
//!   acknowledgements and outbox marks, each leave in one script call per batch: what a
//!   replica asks for while earlier calls are on the wire goes together.
//! - **Numbers never repeat.** Ticket numbers, fences and checkpoint revisions start from the
//!   server clock (in microseconds) when their key is created and grow by one, so a key that
//!   expired restarts above every value it handed out: a stale holder can never match.
//! - **No growth with history.** Idle chats' turn state expires (after a minute, or as long as
//!   a conversation of the chat waits in some replica's memory); empty ticket queues do not
//!   exist in Redis. What stays is a liveness key per live replica (per shard in a cluster)
//!   and a hash per leadership name.
//! - **Two layouts.** [`KeyLayout::Standalone`] for one server; [`KeyLayout::Cluster`] puts every
//!   key one script touches under one hash tag, so no script crosses slots.
//!
//! # What Redis can and cannot promise
//!
//! Redis replication is asynchronous. A failover (Sentinel promoting a replica, a cluster
//! master failing over) can lose the last writes: a turn, a leadership or a lock can then be
//! granted twice for a while. The fences are what limit the damage: every grant carries a
//! fence larger than any before it on the same server history, every send and checkpoint write
//! checks the holder's turn first, and checkpoint writes are compare-and-set on the revision,
//! so the older holder's later writes are refused. A lost write can still make the fence
//! sequence restart from the promoted replica's state; the clock-based start of every counter
//! keeps it above the values handed out before, as long as server clocks are not set back.
//! A Redis restarted with no data is recovered from the same way: every counter starts again
//! above the old values, replicas re-register on their next heartbeat, and conversations
//! continue from the checkpoints that are left (none, if the store lived in the same Redis).
//!
//! Through Sentinel (a `redis+sentinel://` URL, see [`RedisOptions`]), the connections follow
//! the master across failovers. [`RedisOptions::wait_for_replicas`] closes the window in
//! which a failover loses a grant: each grant waits (`WAIT`, pipelined with it) until enough
//! replicas have it, and is not reported otherwise.
//!
//! # Security
//!
//! User and password come from the URL (`redis://user:pass@host:6379/0`); TLS is `rediss://`
//! (`rediss+sentinel://` through Sentinel), with rustls and the webpki roots. Passwords never
//! appear in this crate's log lines or errors.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use botmesh_redis_store::RedisStore;
//!
//! let store = RedisStore::new("redis://127.0.0.1:6379/", "shop").await?;
//! let coordinator = store.coordinator(Duration::from_secs(15)).with_replica_id("pod-1");
//! # let _ = coordinator; Ok(()) }
//! ```
//!
//! # Feature flags
//!
//! - `tls` (on by default): `rediss://` URLs, over rustls with the web PKI roots or your own
//!   CA ([`RedisOptions::tls_root_cert`]).
//! - `serde`: [`RedisOptions`] and [`KeyLayout`] deserialize from configuration files, with
//!   durations as text (`response_timeout = "2s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod call;
#[cfg(feature = "serde")]
mod config;
mod conn;
mod coordinator;
mod inbox;
mod journal;
mod keys;
mod parts;
mod replicas;
mod scripts;
mod store;

use std::time::Duration;

pub use coordinator::RedisCoordinator;
pub use keys::KeyLayout;
pub use store::RedisStore;

/// How many replicas a grant waits for, and how long (see
/// [`RedisOptions::wait_for_replicas`] and `replicas.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

/// How to reach Redis.
///
/// Defaults: the standalone layout, 2 s to connect, 2 s for a reply, `max_poll` 100 ms, idle
/// chat state kept one minute, no waiting for replicas. `Debug` output shows the URLs without
/// their passwords.
///
/// # Through Sentinel
///
/// A Redis with replicas that Sentinel fails over is reached through its sentinels, with a
/// `redis+sentinel://` URL given to [`new`](Self::new) (or [`RedisStore::new`]), or with
/// [`sentinel`](Self::sentinel):
///
/// ```text
/// redis+sentinel://[[USER]:PASSWORD@]HOST1[:PORT1][,HOST2[:PORT2]...]/MASTER_NAME[/DB]
///     [?sentinel_password=PASSWORD[&sentinel_username=USER]]
/// ```
///
/// The sentinels are comma-separated (port 26379 when left out, IPv6 hosts in brackets), the
/// path is the name they watch the master under, then optionally the database. The user and
/// password before the hosts are the data nodes' (percent-encoded, as in `redis://`); sentinels
/// that ask for a password of their own take it from `sentinel_password`.
/// `rediss+sentinel://` speaks TLS to the sentinels and the data nodes alike. Every connection
/// follows the master: when Sentinel announces a failover, or a node refuses a write as a
/// replica does, the next command asks the sentinels again; the wake channel subscribes again
/// at the new master.
///
/// # Waiting for replicas
///
/// Replication is asynchronous, so a grant written just before a failover can be lost and
/// granted again. [`wait_for_replicas`](Self::wait_for_replicas) makes every grant wait until
/// enough replicas have it.
///
/// # From a configuration file
///
/// With the `serde` feature they read from a configuration file: `url` (one server, or a
/// `redis+sentinel://` URL), `cluster` (a list of node URLs) or `sentinel` (an object:
/// `nodes`, a list of `host:port`, `master`, and optionally `password`, `sentinel_password`
/// and `tls`), `prefix`, and optionally `layout` (`"standalone"` or `"cluster"`),
/// `connection_timeout`, `response_timeout`, `max_poll` and `idle_keep` as durations in text,
/// and `wait_for_replicas` (an object: `replicas`, a number, and `timeout`, a duration in
/// text). Unknown keys are refused; a private CA's certificate is set in code
/// ([`tls_root_cert`](Self::tls_root_cert)).
///
/// ```
/// # #[cfg(feature = "serde")] {
/// let options: botmesh_redis_store::RedisOptions = serde_json::from_str(
///     r#"{ "url": "redis://127.0.0.1:6379/0", "prefix": "shop", "response_timeout": "1s" }"#,
/// )
/// .unwrap();
/// let through_sentinel: botmesh_redis_store::RedisOptions = serde_json::from_str(
///     r#"{ "sentinel": { "nodes": ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"],
///                        "master": "mymaster", "password": "s3cret" },
///          "prefix": "shop",
///          "wait_for_replicas": { "replicas": 1, "timeout": "500ms" } }"#,
/// )
/// .unwrap();
/// # let _ = (options, through_sentinel); }
/// ```
#[derive(Clone)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "config::RedisOptionsText")
)]
#[non_exhaustive]
#[must_use = "options do nothing until the store connects with them"]
pub struct RedisOptions {
    pub(crate) urls: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) layout: KeyLayout,
    /// Whether `urls` are nodes of a Redis Cluster (the connection follows the slot map).
    pub(crate) cluster: bool,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) max_poll: Duration,
    pub(crate) idle_keep: Duration,
    pub(crate) tls_root: Option<Vec<u8>>,
    /// The replicas every grant waits for.
    pub(crate) replicas: Option<Replicas>,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a password.
        f.debug_struct("RedisOptions")
            .field("urls", &self.urls.iter().map(|u| conn::redact(u)).collect::<Vec<_>>())
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("cluster", &self.cluster)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("max_poll", &self.max_poll)
            .field("idle_keep", &self.idle_keep)
            .field("tls_root", &self.tls_root.is_some())
            .field("wait_for_replicas", &self.replicas.map(|r| (r.count, r.timeout)))
            .finish()
    }
}

impl RedisOptions {
    /// One server at `url`, keys under `prefix`.
    pub fn new(url: &str, prefix: &str) -> Self {
        Self {
            urls: vec![url.to_owned()],
            prefix: prefix.to_owned(),
            layout: KeyLayout::Standalone,
            cluster: false,
            connection_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            max_poll: Duration::from_millis(100),
            idle_keep: Duration::from_secs(60),
            tls_root: None,
            replicas: None,
        }
    }

    /// The master that the sentinels `nodes` (`host:port` each) watch under `master_name`,
    /// keys under `prefix`: the same as [`new`](Self::new) with
    /// `redis+sentinel://HOST1:PORT1,HOST2:PORT2/MASTER_NAME`. For a password or TLS, give
    /// `new` the URL (see [Through Sentinel](Self#through-sentinel)).
    pub fn sentinel<I, S>(nodes: I, master_name: &str, prefix: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        Self::new(&conn::sentinel_url(&nodes, master_name, false, None, None), prefix)
    }

    /// A Redis Cluster reached through any of `urls`, in the cluster layout.
    pub fn cluster<I, S>(urls: I, prefix: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut options = Self::new("", prefix);
        options.urls = urls.into_iter().map(Into::into).collect();
        options.layout = KeyLayout::Cluster;
        options.cluster = true;
        options
    }

    /// The key layout. The cluster layout also works on one server, which eases a later move
    /// to a cluster; a cluster always needs it.
    pub fn layout(mut self, layout: KeyLayout) -> Self {
        self.layout = layout;
        self
    }

    /// How long to wait for a reply before a command fails (and the connection is rebuilt).
    /// Keep it below a third of the coordination lease.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long an idle chat's turn state is kept when no conversation of the chat waits in a
    /// replica's memory (default one minute). Past it the chat leaves no key behind, and its
    /// next holder is told the previous one is unknown.
    pub fn idle_keep(mut self, keep: Duration) -> Self {
        self.idle_keep = keep;
        self
    }

    /// Trusts this CA certificate (PEM) for `rediss://` instead of the public web roots, as for
    /// a Redis behind a private CA. Feature `tls` (on by default).
    #[cfg(feature = "tls")]
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// The longest pause between two polls of a waiting ticket while the wake channel is
    /// down (while it is up, a waiter looks on its own once per lease).
    pub fn max_poll(mut self, max_poll: Duration) -> Self {
        self.max_poll = max_poll;
        self
    }

    /// Makes every grant wait until `replicas` replicas have it, at most `timeout`; off by
    /// default (`replicas` 0 turns it off).
    ///
    /// Replication is asynchronous: a turn, a leadership, a fenced lock or a lease granted on
    /// the master just before a failover may be missing on the replica promoted in its place,
    /// which then grants it to someone else while the first holder acts. With this setting,
    /// each call that grants or renews something its caller acts on sends `WAIT replicas
    /// timeout` after it, pipelined on the same connection (no extra round trip), and reports
    /// the grant only once that many replicas acknowledged it. Fewer within `timeout` is a
    /// retryable [`Error::CoordinationUnavailable`](botmesh_traits::Error): the caller does
    /// not act, and its retry never makes two holders.
    ///
    /// The calls that wait: the coordinator's ticket takes and turn releases (one batch call),
    /// a waiter's look at its turn, campaigns for a leadership and heartbeats, and the store's
    /// `acquire_lock_fenced`, `renew_lock`, `acquire_lease`, `renew_lease` and `task_claim`.
    /// Checkpoint writes and the journal do not: their compare-and-set on revisions, under a
    /// turn that did wait, is what refuses a stale writer.
    ///
    /// Combine it with `min-replicas-to-write 1` and a short `min-replicas-max-lag` on the
    /// master, so that a master cut off from its replicas refuses grants at once
    /// (`NOREPLICAS`, reported the same way) instead of handing out ones a failover will lose.
    /// The trade-off is availability: with one replica, every grant fails while it is down.
    /// `timeout` must be shorter than the [`response_timeout`](Self::response_timeout); not
    /// supported on a Redis Cluster.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some(Replicas { count: replicas, timeout });
        self
    }
}
