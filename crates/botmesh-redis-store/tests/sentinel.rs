//! The store and the coordinator through Sentinel, on real processes (`RedisSentinels`: a
//! master, its replica, three sentinels): they follow the master across a `SENTINEL
//! FAILOVER` and across a killed master, a waiter is woken on the new master, and a wrong URL
//! or master name is a typed error.
//!
//! Timing: these are real processes, and a failover takes seconds (a killed master is noticed
//! after a second without an answer, then the sentinels elect a leader and promote the
//! replica). The bounds below are generous and only say that the thing happens; no test
//! measures speed. The tests of this file run one at a time (`SERIAL`): several topologies
//! failing over at once on a two-core machine make sentinels miss their one-second deadlines.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_store::{RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::{
    CoordinatorHarness, RedisSentinels, coordinator_conformance, store_conformance,
};
use botmesh_traits::{ChatKey, Coordinator, ErrorKind, Store};
use tokio::time::Instant;

mod common;
use common::sentinel::{SETTLE, blocking, eventually};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Long enough that no lease runs out during a test: liveness is not what these test.
const LEASE: Duration = Duration::from_secs(60);

/// Waits until `ready`, for at most `within`.
async fn until(within: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "not ready within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of `key` on the data node on `port`, read directly.
fn read(topology: &RedisSentinels, port: u16, key: &str) -> String {
    blocking(|| topology.cli(port, &["GET", key]).unwrap().trim().to_owned())
}

/// A store and its coordinator through the topology's sentinels, and a second replica's
/// coordinator of its own.
async fn replicas(topology: &RedisSentinels) -> (RedisStore, RedisCoordinator, RedisCoordinator) {
    let store = RedisStore::new(&topology.url(), "t").await.unwrap();
    let a = store.coordinator(LEASE).with_replica_id("a");
    let b = RedisCoordinator::new(&topology.url(), "t").await.unwrap().with_lease(LEASE);
    let b = b.with_replica_id("b");
    a.heartbeat(LEASE).await.unwrap();
    b.heartbeat(LEASE).await.unwrap();
    (store, a, b)
}

/// Writes user data `v1`, `v2`, ... until one lands on the master on `port`, and returns it:
/// the store follows the master there.
async fn writes_land_on(topology: &RedisSentinels, store: &RedisStore, port: u16) -> String {
    let deadline = Instant::now() + SETTLE;
    for n in 0.. {
        let value = format!("v{n}");
        if store.set_user_data("ada", &value).await.is_ok()
            && read(topology, port, "t:user:ada") == value
        {
            return value;
        }
        assert!(Instant::now() < deadline, "no write reached the new master on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_the_coordinator_follow_a_sentinel_failover_and_wake_the_waiter_there() {
    let _serial = SERIAL.lock().await;
    let topology = blocking(RedisSentinels::start).unwrap();
    let (store, a, b) = replicas(&topology).await;
    let old = blocking(|| topology.master_port()).unwrap();
    store.set_user_data("ada", "before").await.unwrap();
    assert_eq!(read(&topology, old, "t:user:ada"), "before");

    // A holds the chat's turn; B's ticket waits behind it, subscribed to its wake channel.
    let chat = ChatKey::from("chat");
    let held = a.take_ticket(&chat).await.unwrap().grant.unwrap();
    let ticket = b.take_ticket(&chat).await.unwrap();
    assert!(ticket.grant.is_none());
    let b = Arc::new(b);
    let waiter = {
        let b = Arc::clone(&b);
        tokio::spawn(async move { b.wait_turn(&ticket, SETTLE * 2).await })
    };

    let new = blocking(|| topology.failover()).unwrap();
    assert_ne!(new, old);
    // The old master goes on as one for about eight seconds, until the sentinels turn it into
    // a replica: the store's writes reach the new one before that, following the sentinels'
    // announcement of the failover.
    let value = writes_land_on(&topology, &store, new).await;
    let role = blocking(|| topology.cli(old, &["ROLE"]).unwrap());
    assert!(role.starts_with("master"), "the write came after the demotion: {role}");
    assert_eq!(store.get_user_data("ada").await.unwrap(), Some(value));

    // The release lands on the new master, which knows the turn (it was replicated) and
    // hands it to B's ticket; B hears of it on its channel, subscribed again at the new master.
    let released = Instant::now();
    assert!(eventually(SETTLE, || a.release_turn(&held)).await.unwrap());
    let grant = waiter.await.unwrap().unwrap();
    assert_eq!(grant.seq, ticket_seq(&held));
    assert!(
        released.elapsed() < LEASE / 2,
        "woken by the release, not by the once-per-lease look: {:?}",
        released.elapsed()
    );
    assert!(b.subscribed(), "the wake channel is subscribed at the new master");
    assert!(b.release_turn(&grant).await.unwrap());
    // The coordinator's own connections follow too: heartbeats and new tickets.
    b.heartbeat(LEASE).await.unwrap();
    let next = b.take_ticket(&ChatKey::from("other")).await.unwrap().grant.unwrap();
    assert!(b.release_turn(&next).await.unwrap());
}

/// The ticket right after `held`'s, which B took.
fn ticket_seq(held: &botmesh_traits::TurnGrant) -> u64 {
    held.seq + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_the_coordinator_go_on_after_the_master_is_killed() {
    let _serial = SERIAL.lock().await;
    let mut topology = blocking(RedisSentinels::start).unwrap();
    let (store, a, b) = replicas(&topology).await;
    let chat = ChatKey::from("chat");
    let held = a.take_ticket(&chat).await.unwrap().grant.unwrap();
    let ticket = b.take_ticket(&chat).await.unwrap();
    let lock = store.locks().unwrap().acquire_lock_fenced("job", LEASE).await.unwrap().unwrap();
    // The replica has what came before the crash once it has a write made after it
    // (replication keeps the master's order).
    let replica = blocking(|| topology.replica_port()).unwrap();
    store.set_user_data("probe", "1").await.unwrap();
    until(SETTLE, || read(&topology, replica, "t:user:probe") == "1").await;

    let b = Arc::new(b);
    let waiter = {
        let b = Arc::clone(&b);
        tokio::spawn(async move { b.wait_turn(&ticket, SETTLE * 2).await })
    };
    let killed = blocking(|| topology.kill_master()).unwrap();
    let new = blocking(|| topology.wait_for_master_change(killed)).unwrap();
    assert_eq!(new, replica);

    writes_land_on(&topology, &store, new).await;
    eventually(SETTLE, || a.heartbeat(LEASE)).await.unwrap();
    // What was granted before the crash is still known: the lock is held, the turn too.
    let locks = store.locks().unwrap();
    assert!(eventually(SETTLE, || locks.renew_lock("job", &lock.token, LEASE)).await.unwrap());
    assert!(eventually(SETTLE, || a.release_turn(&held)).await.unwrap());
    let grant = waiter.await.unwrap().unwrap();
    assert!(b.release_turn(&grant).await.unwrap());
    let fresh = a.take_ticket(&ChatKey::from("fresh")).await.unwrap().grant.unwrap();
    assert!(a.release_turn(&fresh).await.unwrap());

    // Brought back, the old master is a replica of the new one, and has the new writes.
    blocking(|| topology.revive(killed)).unwrap();
    let value = writes_land_on(&topology, &store, new).await;
    until(SETTLE, || read(&topology, killed, "t:user:ada") == value).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sentinel_url_or_master_name_is_a_typed_error_without_the_password() {
    let _serial = SERIAL.lock().await;
    let bad = [
        "redis+sentinel://:s3cret@127.0.0.1:1",
        "redis+sentinel://:s3cret@127.0.0.1:1/",
        "redis+sentinel://:s3cret@127.0.0.1:port/mymaster",
        "redis+sentinel://:s3cret@127.0.0.1:1/mymaster?timeout=1",
    ];
    for url in bad {
        let e = RedisStore::new(url, "t").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Configuration, "{url}: {e}");
        assert!(!format!("{e} {e:?}").contains("s3cret"), "{e:?}");
    }

    // No sentinel listens there: unreachable, and worth trying again.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let e = RedisStore::new(&format!("redis+sentinel://:s3cret@127.0.0.1:{port}/mymaster"), "t")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CoordinationUnavailable, "{e}");
    assert!(e.is_retryable());
    assert!(!format!("{e} {e:?}").contains("s3cret"), "{e:?}");

    let topology = blocking(|| RedisSentinels::start_with_password("s3cret")).unwrap();
    let unknown = topology.url().replace("/botmesh", "/nosuchmaster");
    let e = RedisCoordinator::new(&unknown, "t").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Configuration, "{e}");
    assert!(!format!("{e} {e:?}").contains("s3cret"), "{e:?}");
    // The right name and password connect, through the same sentinels.
    let store = RedisStore::new(&topology.url(), "t").await.unwrap();
    store.set_user_data("ada", "1").await.unwrap();
    assert!(!format!("{store:?}").contains("s3cret"));
    let nodes = topology.sentinel_addrs();
    let plain = RedisOptions::sentinel(nodes, topology.master_name(), "t");
    let e = RedisStore::connect(plain).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Configuration, "no password: {e}");

    // Settings that cannot go together.
    let cluster = RedisOptions::cluster(["redis://127.0.0.1:1"], "t")
        .wait_for_replicas(1, Duration::from_millis(100));
    assert_eq!(RedisStore::connect(cluster).await.unwrap_err().kind(), ErrorKind::Configuration);
    let slow = RedisOptions::new(&topology.url(), "t").wait_for_replicas(1, Duration::from_secs(5));
    assert_eq!(RedisStore::connect(slow).await.unwrap_err().kind(), ErrorKind::Configuration);
}

struct Harness(RedisOptions);

impl CoordinatorHarness for Harness {
    async fn replica(&self, id: &str) -> Arc<dyn Coordinator> {
        Arc::new(RedisCoordinator::connect(self.0.clone()).await.unwrap().with_replica_id(id))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_conformance_suites_pass_through_sentinel_waiting_for_a_replica() {
    let _serial = SERIAL.lock().await;
    let topology = blocking(RedisSentinels::start).unwrap();
    // Every grant waits for the replica: a waiter takes a turn handed over only from a look
    // of its own.
    let options =
        RedisOptions::new(&topology.url(), "t").wait_for_replicas(1, Duration::from_millis(500));
    store_conformance(Arc::new(RedisStore::connect(options.clone()).await.unwrap())).await;
    coordinator_conformance(&Harness(options)).await;
}
