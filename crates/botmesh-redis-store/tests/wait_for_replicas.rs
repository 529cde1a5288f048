//! `RedisOptions::wait_for_replicas` on real processes (`RedisSentinels`): a grant on a
//! master whose replica is gone is refused, typed and retryable, instead of granted; and a
//! grant lost in a failover is granted twice without the setting, never with it.
//!
//! Timing: real processes, so the bounds are generous and only say that a thing happens
//! (see `sentinel.rs`); the tests run one at a time (`SERIAL`).
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::time::Duration;

use botmesh_redis_store::{RedisOptions, RedisStore};
use botmesh_testing::RedisSentinels;
use botmesh_traits::{
    ChatKey, CheckpointWrite, Coordinator, Error, ErrorKind, InboxAppend, InboxRecord,
    JournalStore, Leadership, Result, Store,
};
use tokio::time::Instant;

mod common;
use common::sentinel::{
    SETTLE, blocking, cut_off_replica, eventually, lose_master, replicated, two_replicas,
};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Long enough that no lease runs out during a test.
const LEASE: Duration = Duration::from_secs(60);

/// How long a grant waits for its replica: well below the default 2 s response timeout.
const WAIT: Duration = Duration::from_millis(500);

/// Asserts that `result` is the refusal of a grant for want of replicas: typed, retryable.
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T>) {
    match result {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::CoordinationUnavailable, "{what}: {e:?}");
            assert!(e.is_retryable(), "{what}");
        }
        Ok(granted) => panic!("{what} was granted without its replica: {granted:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_on_a_master_whose_replica_is_gone_is_refused_typed_and_retryable() {
    let _serial = SERIAL.lock().await;
    let mut topology = blocking(RedisSentinels::start).unwrap();
    blocking(|| topology.set_min_replicas_to_write(1, Duration::from_secs(1))).unwrap();
    let options = RedisOptions::new(&topology.url(), "w").wait_for_replicas(1, WAIT);
    let store = RedisStore::connect(options).await.unwrap();
    let c = store.coordinator(LEASE).with_replica_id("a");
    let (locks, leases) = (store.locks().unwrap(), store.leases().unwrap());

    // With the replica there, every grant goes through.
    // (Each tried again while the replica catches up, as on a loaded machine it may.)
    eventually(SETTLE, || c.heartbeat(LEASE)).await.unwrap();
    let led = eventually(SETTLE, || c.try_lead("transport", LEASE)).await.unwrap().unwrap();
    let one = ChatKey::from("one");
    let turn = eventually(SETTLE, || c.take_ticket(&one)).await.unwrap().grant.unwrap();
    eventually(SETTLE, || c.release_turn(&turn)).await.unwrap();
    let lock = eventually(SETTLE, || locks.acquire_lock_fenced("job", LEASE)).await.unwrap();
    let lock = lock.unwrap();
    eventually(SETTLE, || locks.release_lock("job", &lock.token)).await.unwrap();
    let lease = eventually(SETTLE, || leases.acquire_lease("cron", "a", LEASE)).await.unwrap();
    assert!(lease.is_some());

    // The replica stops answering: first the wait runs out (`WAIT` counts no
    // acknowledgement), then, past `min-replicas-max-lag`, the master refuses writes itself
    // (`NOREPLICAS`). Either way, nothing is granted.
    let replica = blocking(|| topology.replica_port()).unwrap();
    blocking(|| topology.node(replica).unwrap().pause()).unwrap();
    refused("a campaign already won", c.try_lead("transport", LEASE).await);
    refused("a ticket of a free chat", c.take_ticket(&ChatKey::from("two")).await);
    refused("a fenced lock", locks.acquire_lock_fenced("job", LEASE).await);
    refused("a lease already held", leases.acquire_lease("cron", "a", LEASE).await);
    refused("a lease renewal", leases.renew_lease("cron", "a", LEASE).await);
    refused("a heartbeat", c.heartbeat(LEASE).await);
    let master = blocking(|| topology.master_port()).unwrap();
    let deadline = Instant::now() + SETTLE;
    while !blocking(|| topology.cli(master, &["SET", "k", "v"]).unwrap()).contains("NOREPLICAS") {
        assert!(Instant::now() < deadline, "min-replicas-to-write never refused a write");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    refused("a ticket under NOREPLICAS", c.take_ticket(&ChatKey::from("three")).await);
    refused("a fenced lock under NOREPLICAS", locks.acquire_lock_fenced("job", LEASE).await);

    // The replica back, the retries get what was refused, and nothing was left held: the
    // leadership and the lease are re-entrant, the lock refused was given back, the ticket
    // refused was withdrawn.
    blocking(|| topology.node(replica).unwrap().resume()).unwrap();
    let again = eventually(SETTLE, || c.try_lead("transport", LEASE)).await.unwrap().unwrap();
    assert_eq!(again.fence, led.fence, "the same leadership");
    assert!(
        eventually(SETTLE, || locks.acquire_lock_fenced("job", LEASE)).await.unwrap().is_some()
    );
    assert!(leases.acquire_lease("cron", "a", LEASE).await.unwrap().is_some());
    let chat = ChatKey::from("two");
    let two = eventually(SETTLE, || c.take_ticket(&chat)).await.unwrap();
    assert!(two.grant.is_some(), "the refused ticket was withdrawn: the chat is free");
    c.heartbeat(LEASE).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_writes_a_message_rests_on_wait_for_the_replica_too() {
    let _serial = SERIAL.lock().await;
    // No `min-replicas-to-write`: the master takes every write, and only the wait refuses.
    let topology = blocking(RedisSentinels::start).unwrap();
    let options = RedisOptions::new(&topology.url(), "s").wait_for_replicas(1, WAIT);
    let store = RedisStore::connect(options).await.unwrap();
    let record = InboxRecord::pending("m1", "chat", "{}", "a");
    let write = CheckpointWrite::new("{\"step\":1}");

    let replica = blocking(|| topology.replica_port()).unwrap();
    blocking(|| topology.node(replica).unwrap().pause()).unwrap();
    refused("a journal append", store.inbox_append(&record, LEASE).await);
    refused("a checkpoint write", store.set_checkpoint("conv", &write).await);
    refused("an acknowledgement", store.inbox_ack("m1").await);

    // Landed on the master all the same: once the replica has them, a retry finds the record
    // journaled (a duplicate of our own) and writes the checkpoint again.
    blocking(|| topology.node(replica).unwrap().resume()).unwrap();
    let again = eventually(SETTLE, || store.inbox_append(&record, LEASE)).await.unwrap();
    assert!(matches!(again, InboxAppend::Duplicate { .. }), "{again:?}");
    eventually(SETTLE, || store.set_checkpoint("conv", &write)).await.unwrap();
    assert_eq!(store.get_checkpoint("conv").await.unwrap().unwrap().data, write.data);
}

/// A leadership granted to A on a master that cannot pass it on (its replica frozen and its
/// replication link cut), then the master killed and the replica promoted: what A's
/// campaign returned, and what B's returns on the new master. `wait` turns
/// `wait_for_replicas` on.
async fn campaigns_across_a_lost_grant(wait: bool) -> (Result<Option<Leadership>>, Leadership) {
    let mut topology = blocking(RedisSentinels::start).unwrap();
    let (a, b) = two_replicas(&topology, "d", LEASE, wait.then_some(WAIT)).await;
    // Both replicas are known alive on the replica too.
    replicated(&topology).await;

    let replica = cut_off_replica(&topology);
    let first = a.try_lead("transport", LEASE).await;
    // The master dies with the grant; the replica is promoted without it.
    let killed = lose_master(&mut topology, replica);
    if wait {
        // A grant waits for a replica: the old master comes back as one.
        blocking(|| topology.revive(killed)).unwrap();
    }
    // The promoted replica has no leader for the name: B's campaign wins.
    let second = eventually(SETTLE, || b.try_lead("transport", LEASE)).await.unwrap();
    (first, second.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_lost_in_a_failover_is_granted_twice_without_waiting_for_replicas() {
    let _serial = SERIAL.lock().await;
    let (a, b) = campaigns_across_a_lost_grant(false).await;
    // A's campaign was granted by the master alone.
    let a = a.unwrap().unwrap();
    // Two leaders of one name at once: A was told it leads, and so is B.
    assert_eq!((a.name.as_str(), b.name.as_str()), ("transport", "transport"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_lost_in_a_failover_was_never_reported_when_waiting_for_replicas() {
    let _serial = SERIAL.lock().await;
    let (a, b) = campaigns_across_a_lost_grant(true).await;
    // A was never told it leads: the grant did not reach the replica in time. B alone leads.
    match a {
        Err(e @ Error::CoordinationUnavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("A's campaign without its replica: {other:?}"),
    }
    assert_eq!(b.name, "transport");
}
