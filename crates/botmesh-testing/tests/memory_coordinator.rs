//! The in-process coordinator: the conformance suite on a hub, and what only the memory backend
//! has (crash and stall simulation, idle eviction, first-sight registration).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, coordinator_conformance};
use botmesh_traits::{Coordinator, ErrorKind, Result};
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);

async fn live(hub: &MemoryCoordinationHub, id: &str) -> Arc<MemoryCoordinator> {
    let c = Arc::new(MemoryCoordinator::new(hub.clone(), id));
    c.heartbeat(LONG).await.unwrap();
    c
}

fn unavailable<T: std::fmt::Debug>(r: Result<T>) {
    assert_eq!(r.unwrap_err().kind(), ErrorKind::CoordinationUnavailable);
}

#[tokio::test(start_paused = true)]
async fn conformance_under_paused_time() {
    coordinator_conformance(&MemoryCoordinationHub::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_under_real_time_on_threads() {
    coordinator_conformance(&MemoryCoordinationHub::new()).await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_replica_does_nothing_and_loses_everything_at_its_lease() {
    let hub = MemoryCoordinationHub::new();
    let a = Arc::new(MemoryCoordinator::new(hub.clone(), "a"));
    let b = live(&hub, "b").await;
    a.heartbeat(Duration::from_secs(1)).await.unwrap();

    let ga = a.take_ticket(&"held".into()).await.unwrap().grant.unwrap();
    let la = a.try_lead("provider:x", Duration::from_secs(1)).await.unwrap().unwrap();
    let gb = b.take_ticket(&"queued".into()).await.unwrap().grant.unwrap();
    let ta = a.take_ticket(&"queued".into()).await.unwrap();
    let tb = b.take_ticket(&"queued".into()).await.unwrap();
    let waiting = {
        let (a, ta) = (Arc::clone(&a), ta.clone());
        tokio::spawn(async move { a.wait_turn(&ta, LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;

    a.crash();
    unavailable(waiting.await.unwrap());
    unavailable(a.heartbeat(LONG).await);
    unavailable(a.take_ticket(&"other".into()).await);
    unavailable(a.wait_turn(&ta, LONG).await);
    unavailable(a.release_turn(&ga).await);
    unavailable(a.cancel_ticket(&ta).await);
    unavailable(a.try_lead("provider:x", LONG).await);
    unavailable(a.resign(&la).await);
    a.set_stalled(false); // a crash cannot be undone
    unavailable(a.heartbeat(LONG).await);
    assert_eq!(hub.key_count(), 2, "nothing it tried after crashing was recorded");

    let tb_held = b.take_ticket(&"held".into()).await.unwrap();
    assert_eq!(tb_held.grant, None, "a crash releases nothing");
    assert_eq!(b.try_lead("provider:x", LONG).await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.try_lead("provider:x", LONG).await.unwrap(), None, "the lease still runs");

    let start = Instant::now();
    let g = b.wait_turn(&tb_held, LONG).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(490) && waited <= Duration::from_millis(700),
        "the turn comes once the crashed replica's lease ran out (within a poll): {waited:?}"
    );
    assert_eq!(g.previous_holder.as_deref(), Some("a"));
    assert!(g.fence > ga.fence);
    let lb = b.try_lead("provider:x", LONG).await.unwrap().unwrap();
    assert!(lb.fence > la.fence);

    assert!(b.release_turn(&gb).await.unwrap());
    let g2 = b.wait_turn(&tb, Duration::ZERO).await.unwrap();
    assert_eq!(g2.seq, tb.seq, "the crashed replica's queued ticket is skipped");
    assert_eq!(g2.previous_holder.as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_replica_cannot_renew_but_still_acts() {
    let hub = MemoryCoordinationHub::new();
    let a = MemoryCoordinator::new(hub.clone(), "a");
    let b = live(&hub, "b").await;
    a.heartbeat(Duration::from_secs(1)).await.unwrap();
    let ga = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();

    a.set_stalled(true);
    unavailable(a.heartbeat(Duration::from_secs(1)).await);
    let other =
        a.take_ticket(&"other".into()).await.unwrap().grant.expect("other calls still work");
    assert!(a.release_turn(&other).await.unwrap());

    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    assert_eq!(tb.grant, None);
    let gb = b.wait_turn(&tb, LONG).await.unwrap();
    assert_eq!(gb.previous_holder.as_deref(), Some("a"));
    assert!(!a.release_turn(&ga).await.unwrap(), "the stalled replica lost its turn");
    assert_eq!(
        a.try_lead("job", LONG).await.unwrap(),
        None,
        "a replica past its lease leads nothing"
    );

    a.set_stalled(false);
    a.heartbeat(LONG).await.unwrap();
    assert_eq!(a.take_ticket(&"chat".into()).await.unwrap().grant, None, "b holds the chat now");
    assert!(a.try_lead("job", LONG).await.unwrap().is_some(), "a renewed replica leads again");
    assert!(b.release_turn(&gb).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_replica_first_seen_without_a_lease_gets_the_default() {
    let hub = MemoryCoordinationHub::new();
    let a = MemoryCoordinator::new(hub.clone(), "a");
    let b = live(&hub, "b").await;
    let start = Instant::now();
    let ga = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();
    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    unavailable(b.wait_turn(&tb, Duration::from_secs(14)).await);
    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    let gb = b.wait_turn(&tb, Duration::from_secs(10)).await.unwrap();
    assert!(start.elapsed() >= botmesh_traits::DEFAULT_LEASE);
    assert!(start.elapsed() < botmesh_traits::DEFAULT_LEASE + Duration::from_millis(200));
    assert!(gb.fence > ga.fence);
}

#[tokio::test(start_paused = true)]
async fn a_skipped_ticket_fails_its_wait_at_once() {
    let hub = MemoryCoordinationHub::new();
    let a = live(&hub, "a").await;
    let b = MemoryCoordinator::new(hub.clone(), "b");
    b.heartbeat(Duration::from_secs(1)).await.unwrap();
    let ga = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();
    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(a.release_turn(&ga).await.unwrap());
    b.heartbeat(LONG).await.unwrap();
    let start = Instant::now();
    unavailable(b.wait_turn(&tb, LONG).await);
    assert_eq!(start.elapsed(), Duration::ZERO, "a ticket that is gone is not waited for");
    // A ticket taken by a replica whose lease has run out is skipped at once too.
    b.set_stalled(true);
    tokio::time::sleep(Duration::from_secs(61)).await;
    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    assert_eq!(tb.grant, None);
    unavailable(b.wait_turn(&tb, LONG).await);
    assert_eq!(hub.idle_key_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn durations_too_large_for_the_clock_mean_forever() {
    let hub = MemoryCoordinationHub::new();
    let a = live(&hub, "a").await;
    let b = Arc::new(MemoryCoordinator::new(hub.clone(), "b"));
    b.heartbeat(Duration::MAX).await.unwrap();
    assert!(b.try_lead("job", Duration::MAX).await.unwrap().is_some());
    let ga = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();
    let tb = b.take_ticket(&"chat".into()).await.unwrap();
    let waiting = {
        let (b, tb) = (Arc::clone(&b), tb.clone());
        tokio::spawn(async move { b.wait_turn(&tb, Duration::MAX).await })
    };
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!waiting.is_finished());
    assert!(a.release_turn(&ga).await.unwrap());
    assert_eq!(waiting.await.unwrap().unwrap().seq, tb.seq);
    tokio::time::sleep(Duration::from_secs(365 * 24 * 3600)).await;
    assert!(a.try_lead("job", LONG).await.unwrap().is_none(), "b's lease never ends");
}

#[tokio::test(start_paused = true)]
async fn idle_chats_are_evicted_and_fences_stay_monotonic() {
    const CHATS: usize = 20_000;
    let hub = MemoryCoordinationHub::new();
    let a = live(&hub, "a").await;
    let max = MemoryCoordinationHub::DEFAULT_MAX_IDLE_KEYS;
    let mut fences = Vec::with_capacity(CHATS);
    for i in 0..CHATS {
        let g = a.take_ticket(&format!("chat:{i}").into()).await.unwrap().grant.unwrap();
        assert_eq!(g.previous_holder, None);
        fences.push(g.fence);
        assert!(a.release_turn(&g).await.unwrap());
        assert!(hub.key_count() <= max, "{} keys after chat {i}", hub.key_count());
    }
    assert_eq!(hub.key_count(), max);
    assert_eq!(hub.idle_key_count(), max);

    let last = CHATS - 1;
    let g = a.take_ticket(&format!("chat:{last}").into()).await.unwrap().grant.unwrap();
    assert_eq!(g.previous_holder.as_deref(), Some("a"), "a recent idle chat is kept");
    assert!(g.fence > fences[last]);
    fences[last] = g.fence;
    assert!(a.release_turn(&g).await.unwrap());

    // Every chat of the first pass has been evicted by the time this pass reaches it.
    for (i, old) in fences.iter().enumerate() {
        let g = a.take_ticket(&format!("chat:{i}").into()).await.unwrap().grant.unwrap();
        assert!(g.fence > *old, "chat:{i}: fence {} after {old}", g.fence);
        assert_eq!(g.previous_holder, None, "chat:{i} was evicted and re-created");
        assert!(a.release_turn(&g).await.unwrap());
        assert!(hub.key_count() <= max);
    }
}

#[tokio::test(start_paused = true)]
async fn eviction_takes_the_least_recently_used_idle_chat() {
    let hub = MemoryCoordinationHub::with_max_idle_keys(3);
    let a = live(&hub, "a").await;
    let b = live(&hub, "b").await;
    let cycle = |c: Arc<MemoryCoordinator>, key: &'static str| async move {
        let g = c.take_ticket(&key.into()).await.unwrap().grant.unwrap();
        assert!(c.release_turn(&g).await.unwrap());
        g
    };
    cycle(Arc::clone(&a), "k1").await;
    cycle(Arc::clone(&a), "k2").await;
    cycle(Arc::clone(&a), "k3").await;
    let held = b.take_ticket(&"busy".into()).await.unwrap().grant.unwrap();
    assert_eq!((hub.key_count(), hub.idle_key_count()), (4, 3), "a held chat is not idle");
    cycle(Arc::clone(&b), "k1").await; // k1 is now the most recently used
    cycle(Arc::clone(&a), "k4").await; // evicts k2
    assert_eq!((hub.key_count(), hub.idle_key_count()), (4, 3));
    assert_eq!(cycle(Arc::clone(&a), "k1").await.previous_holder.as_deref(), Some("b"));
    // Bringing k2 back evicts k3, the least recently used now.
    assert_eq!(cycle(Arc::clone(&b), "k2").await.previous_holder, None, "k2 was evicted");
    assert_eq!(cycle(Arc::clone(&b), "k4").await.previous_holder.as_deref(), Some("a"));
    assert_eq!(cycle(Arc::clone(&b), "k3").await.previous_holder, None, "k3 was evicted");

    // A chat with a queued ticket is not idle either.
    let queued = a.take_ticket(&"busy".into()).await.unwrap();
    assert!(b.release_turn(&held).await.unwrap());
    assert_eq!(hub.key_count(), 4);
    let g = a.wait_turn(&queued, Duration::ZERO).await.unwrap();
    assert_eq!(g.previous_holder.as_deref(), Some("b"));
    assert!(a.release_turn(&g).await.unwrap());
    assert_eq!((hub.key_count(), hub.idle_key_count()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn a_hub_evicting_everything_keeps_no_idle_chat() {
    let hub = MemoryCoordinationHub::with_max_idle_keys(0);
    let a = live(&hub, "a").await;
    let g1 = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();
    assert_eq!(hub.key_count(), 1);
    assert!(a.release_turn(&g1).await.unwrap());
    assert_eq!(hub.key_count(), 0);
    let g2 = a.take_ticket(&"chat".into()).await.unwrap().grant.unwrap();
    assert_eq!(g2.previous_holder, None);
    assert!(g2.fence > g1.fence);
    assert!(g2.seq > g1.seq, "ticket numbers are not reused after an eviction");
    assert!(!a.release_turn(&g1).await.unwrap(), "a stale grant does not release a new turn");
    assert!(a.release_turn(&g2).await.unwrap());
}

#[tokio::test]
async fn clones_of_a_hub_share_one_state() {
    let hub = MemoryCoordinationHub::new();
    let a = MemoryCoordinator::new(hub.clone(), "a");
    let t = a.take_ticket(&"chat".into()).await.unwrap();
    assert!(t.grant.is_some());
    let copy = hub.clone();
    assert_eq!(copy.key_count(), 1);
    let b = MemoryCoordinator::new(copy, "b");
    assert_eq!(b.take_ticket(&"chat".into()).await.unwrap().grant, None);
    assert_eq!(b.replica_id(), "b");
    assert!(format!("{hub:?}").contains("keys: 1"));
}
