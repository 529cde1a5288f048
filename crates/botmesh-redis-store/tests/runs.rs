//! A run of one replica's consecutive tickets in a chat: the turn passes between them without
//! a round trip, other replicas see it held all along, and the run ends in Redis.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

mod common;

use std::time::Duration;

use botmesh_redis_store::{RedisCoordinator, RedisOptions};
use botmesh_testing::RedisServer;
use botmesh_traits::{ChatKey, Coordinator, Ticket};

use common::{reset_stats, script_calls};

const LEASE: Duration = Duration::from_secs(5);

/// Generous: a grant that is due arrives within milliseconds.
const WAIT: Duration = Duration::from_secs(5);

/// Long enough for a wrongly granted turn to have arrived (its hand-over takes a round trip).
const STILL: Duration = Duration::from_millis(300);

async fn replica(url: &str, id: &str) -> RedisCoordinator {
    let coordinator = RedisCoordinator::connect(RedisOptions::new(url, "runs"))
        .await
        .unwrap()
        .with_lease(LEASE)
        .with_replica_id(id);
    coordinator.heartbeat(LEASE).await.unwrap();
    coordinator
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_passes_along_a_run_of_one_replica_s_tickets_without_a_round_trip() {
    let Setup { _server, mut admin, a, b, run, theirs } = a_run_of(3).await;
    assert!(theirs.grant.is_none(), "b queues behind a's three tickets");

    reset_stats(&mut admin).await;
    let mut grant = run[0].grant.clone().unwrap();
    for ticket in &run[1..] {
        assert!(a.release_turn(&grant).await.unwrap());
        grant = tokio::time::timeout(WAIT, a.wait_turn(ticket, WAIT)).await.unwrap().unwrap();
        assert_eq!((grant.seq, grant.fence), (ticket.seq, ticket.seq), "its own fence");
        assert_eq!(grant.previous_holder.as_deref(), Some("a"));
        assert!(grant.passed_over.is_empty());
    }
    assert_eq!(script_calls(&mut admin).await, 0, "the turn passed twice without asking Redis");

    let waiting = tokio::time::timeout(STILL, b.wait_turn(&theirs, WAIT)).await;
    assert!(waiting.is_err(), "b sees the turn held all along");

    assert!(a.release_turn(&grant).await.unwrap());
    let g = tokio::time::timeout(WAIT, b.wait_turn(&theirs, WAIT)).await.unwrap().unwrap();
    assert_eq!(g.seq, theirs.seq);
    assert!(g.fence > grant.fence, "fences grow across the run");
    assert_eq!(g.previous_holder.as_deref(), Some("a"));
    assert!(g.passed_over.is_empty(), "nothing was passed over: {:?}", g.passed_over);
    assert!(b.release_turn(&g).await.unwrap());

    // The run's tickets left the queue with it: the chat is free again.
    let next = a.take_ticket(&ChatKey::from("chat")).await.unwrap();
    assert!(next.grant.is_some(), "a free chat grants the next ticket at once");
}

/// Replica `a`'s run of tickets in chat `chat`, `b`'s ticket behind it, and an admin
/// connection to the server, which lives as long as the result (bind its field: a `..`
/// pattern would drop it at once).
struct Setup {
    _server: RedisServer,
    admin: redis::aio::MultiplexedConnection,
    a: RedisCoordinator,
    b: RedisCoordinator,
    run: Vec<Ticket>,
    theirs: Ticket,
}

async fn a_run_of(len: usize) -> Setup {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let client = redis::Client::open(url.as_str()).unwrap();
    let admin = client.get_multiplexed_async_connection().await.unwrap();
    let (a, b) = (replica(&url, "a").await, replica(&url, "b").await);
    let key = ChatKey::from("chat");
    let run = a.take_tickets(&key, len).await.unwrap();
    let theirs = b.take_ticket(&key).await.unwrap();
    Setup { _server: server, admin, a, b, run, theirs }
}

/// A run of two, the turn passed from the first ticket to the second (not taken yet).
async fn passed_to_the_second() -> (Setup, Ticket) {
    let mut setup = a_run_of(2).await;
    assert!(setup.a.release_turn(setup.run[0].grant.as_ref().unwrap()).await.unwrap());
    let second = setup.run.pop().unwrap();
    (setup, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_withdrawn_after_the_turn_passed_to_it_ends_the_run_and_its_message_is_taken_over()
{
    let (Setup { _server, a, b, theirs, .. }, second) = passed_to_the_second().await;
    // Its message is dropped before it took the turn.
    a.cancel_ticket(&second).await.unwrap();
    let g = tokio::time::timeout(WAIT, b.wait_turn(&theirs, WAIT)).await.unwrap().unwrap();
    assert_eq!(g.seq, theirs.seq);
    assert_eq!(g.passed_over, [a.incarnation()], "b takes the withdrawn message over");
    assert_eq!(g.previous_holder.as_deref(), Some("a"), "the run's first turn was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_turn_in_a_run_is_released_in_redis_and_keeps_the_run_s_holder() {
    let (Setup { _server, a, b, theirs, .. }, second) = passed_to_the_second().await;
    let second = tokio::time::timeout(WAIT, a.wait_turn(&second, WAIT)).await.unwrap().unwrap();
    let options = botmesh_traits::ReleaseOptions::unused();
    assert!(a.release_turn_with(&second, &options).await.unwrap());
    let g = tokio::time::timeout(WAIT, b.wait_turn(&theirs, WAIT)).await.unwrap().unwrap();
    assert_eq!(g.previous_holder.as_deref(), Some("a"), "the run's first turn was used");
    assert!(g.passed_over.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_s_release_finds_the_turn_on_any_ticket_of_the_run() {
    let Setup { _server, mut admin, a, b, run, theirs } = a_run_of(3).await;
    let mut grant = run[0].grant.clone().unwrap();
    assert!(a.release_turn(&grant).await.unwrap());
    // As if an earlier release of the first turn had reached Redis with its reply lost:
    // Redis handed the turn on to the run's second ticket, which then went on in `a`.
    let second = run[1].seq;
    let holder = format!("{}|{second}|{second}|lost", a.incarnation());
    redis::cmd("HSET")
        .arg("runs:coord:t:chat")
        .arg("h")
        .arg(holder)
        .exec_async(&mut admin)
        .await
        .unwrap();
    redis::cmd("ZREMRANGEBYSCORE")
        .arg("runs:coord:q:chat")
        .arg(second)
        .arg(second)
        .exec_async(&mut admin)
        .await
        .unwrap();
    for ticket in &run[1..] {
        grant = tokio::time::timeout(WAIT, a.wait_turn(ticket, WAIT)).await.unwrap().unwrap();
        assert!(a.release_turn(&grant).await.unwrap(), "the run's release finds its turn");
    }
    let g = tokio::time::timeout(WAIT, b.wait_turn(&theirs, WAIT)).await.unwrap().unwrap();
    assert_eq!(g.seq, theirs.seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_one_command_carries_is_taken_in_order() {
    // 5,000 tickets queue as 9,998 values, more than Redis's Lua hands one command.
    let Setup { _server, run, theirs, .. } = a_run_of(5_000).await;
    assert_eq!(run.len(), 5_000);
    assert!(run[0].grant.is_some(), "the first ticket comes with the free turn");
    assert!(run.windows(2).all(|w| w[0].seq < w[1].seq), "tickets in order");
    assert!(theirs.seq > run[4_999].seq && theirs.grant.is_none(), "b queues behind them all");
}
