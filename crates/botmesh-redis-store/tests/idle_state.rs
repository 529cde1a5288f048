//! A chat's coordination state between turns: kept for the idle keep after its last turn, and
//! kept for good again, its ticket counter going on, when a turn is taken meanwhile.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

mod common;

use std::time::Duration;

use botmesh_redis_store::{RedisCoordinator, RedisOptions};
use botmesh_testing::RedisServer;
use botmesh_traits::{ChatKey, Coordinator, TurnGrant};

use common::{calls, reset_stats};

const LEASE: Duration = Duration::from_secs(5);

const IDLE_KEEP: Duration = Duration::from_secs(600);

/// The state key's time to live in ms: -1 with none, -2 when the key does not exist.
async fn ttl(admin: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("PTTL").arg("idle:coord:t:chat").query_async(admin).await.unwrap()
}

async fn granted(c: &RedisCoordinator) -> TurnGrant {
    let ticket = c.take_ticket(&ChatKey::from("chat")).await.unwrap();
    assert!(ticket.grant.is_some(), "a free chat grants its ticket at once");
    ticket.grant.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_taken_on_an_idle_chat_keeps_its_state_and_goes_on_from_its_counter() {
    let server = RedisServer::start().unwrap();
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let options = RedisOptions::new(&server.url(), "idle").idle_keep(IDLE_KEEP);
    let c = RedisCoordinator::connect(options).await.unwrap().with_lease(LEASE);
    c.heartbeat(LEASE).await.unwrap();

    reset_stats(&mut admin).await;
    let first = granted(&c).await;
    assert_eq!(ttl(&mut admin).await, -1, "a held turn's state does not expire");
    assert!(c.release_turn(&first).await.unwrap());
    let idle = ttl(&mut admin).await;
    assert!(idle > 0 && idle <= 600_000, "an idle chat's state expires after the keep: {idle}");

    let second = granted(&c).await;
    assert_eq!(ttl(&mut admin).await, -1, "a turn taken on an idle chat clears its expiry");
    assert_eq!(second.seq, first.seq + 1, "tickets go on from the counter");
    assert!(second.fence > first.fence, "fences grow");
    assert!(c.release_turn(&second).await.unwrap());
    assert_eq!(granted(&c).await.seq, first.seq + 2, "the grant wrote the counter");
    assert_eq!(
        calls(&mut admin, &["cmdstat_hincrby:"]).await,
        0,
        "a free turn's grant writes the counter"
    );
}
