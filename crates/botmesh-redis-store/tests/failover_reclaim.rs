//! A turn given back, or a ticket withdrawn, on a master that dies before its replica has it:
//! the promoted replica records it as still held (or queued) by a replica that is alive and
//! knows nothing of it. The chat must not stay stuck for as long as that replica runs: it
//! gives such turns back once the master has moved, with or without waiting for replicas.
//!
//! Timing: real processes (`RedisSentinels`), so the bounds are generous and only say that a
//! thing happens: the leases are a minute long, so a chat freed within `FREED` was freed by
//! its holder, not by its expiry.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::time::Duration;

use botmesh_testing::RedisSentinels;
use botmesh_traits::{ChatKey, Coordinator};
use tokio::time::Instant;

mod common;
use common::sentinel::{
    SETTLE, blocking, cut_off_replica, eventually, lose_master, replicated, two_replicas,
};

/// Long enough that no liveness key runs out during a test: a chat freed meanwhile was freed
/// by the replica holding it.
const LEASE: Duration = Duration::from_secs(60);

/// How long a grant waits for its replica.
const WAIT: Duration = Duration::from_millis(500);

/// How long the chat may take to be free after the failover, on a loaded machine: the move
/// noticed, the settle waits (a few seconds) and the withdrawal; far below `LEASE`.
const FREED: Duration = SETTLE;

/// Replica A holds chat `held` and has a ticket queued behind B on chat `queued`; both are
/// replicated. Then the replica node freezes with its link cut, A releases its turn and
/// withdraws its ticket on the master alone, and the master dies. Once the replica is
/// promoted, B's next tickets on both chats must get their turns while A stays alive.
async fn a_failover_undoes_what_a_gave_up(wait: bool) {
    let mut topology = blocking(RedisSentinels::start).unwrap();
    let (a, b) = two_replicas(&topology, "reclaim", LEASE, wait.then_some(WAIT)).await;

    let (held, queued) = (ChatKey::from("held"), ChatKey::from("queued"));
    // (Tried again while the replica catches up, as on a loaded machine it may.)
    let turn = eventually(SETTLE, || a.take_ticket(&held)).await.unwrap().grant.unwrap();
    let b_turn = eventually(SETTLE, || b.take_ticket(&queued)).await.unwrap().grant.unwrap();
    let behind = eventually(SETTLE, || a.take_ticket(&queued)).await.unwrap();
    assert!(behind.grant.is_none(), "A's ticket waits behind B");
    replicated(&topology).await;

    // The replica freezes and its link is cut: nothing A does now reaches it.
    let replica = cut_off_replica(&topology);
    // Landed on the master; waiting for replicas, reported failed (and retried, as the
    // coordination runtime does, below).
    let released = a.release_turn(&turn).await;
    assert_eq!(released.is_err(), wait, "released: {released:?}");
    // Withdrawals are confirmed by the master alone.
    a.cancel_ticket(&behind).await.unwrap();

    // The master dies; the replica is promoted without A's release and withdrawal.
    let killed = lose_master(&mut topology, replica);
    if wait {
        blocking(|| topology.revive(killed)).unwrap();
    }

    // A lives on, heartbeating, and retries a release that failed; B's turn on `queued`
    // ends and its next message comes.
    let beating = tokio::spawn(async move {
        let mut unreleased = released.is_err();
        loop {
            unreleased = unreleased && a.release_turn(&turn).await.is_err();
            let _ = a.heartbeat(LEASE).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let started = Instant::now();
    let next_turn = |chat: ChatKey| {
        let b = &b;
        async move {
            let deadline = Instant::now() + FREED;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "{chat} stays held by a live replica that gave it up");
                let Ok(ticket) = b.take_ticket(&chat).await else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                match b.wait_turn(&ticket, left).await {
                    Ok(grant) => return grant,
                    Err(e) => panic!("{chat}: no turn within {FREED:?}: {e}"),
                }
            }
        }
    };
    let _ = b.release_turn(&b_turn).await;
    let first = next_turn(held.clone()).await;
    let second = next_turn(queued.clone()).await;
    beating.abort();
    assert!(started.elapsed() < FREED);
    b.release_turn(&first).await.unwrap();
    b.release_turn(&second).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_lost_in_a_failover_does_not_hold_the_chat_while_its_replica_lives() {
    a_failover_undoes_what_a_gave_up(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_timed_out_waiting_for_replicas_does_not_hold_the_chat_after_a_failover() {
    a_failover_undoes_what_a_gave_up(true).await;
}
