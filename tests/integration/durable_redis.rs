//! What a durable message costs on Redis: with a coordinator made by the store, the journal
//! is written in the coordinator's own script calls.

use std::sync::Arc;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Coordinator;
use botmesh_core::{Bot, BotError, Durability};
use botmesh_redis_store::{RedisCoordinator, RedisStore};
use botmesh_testing::{RedisServer, TestProvider};

/// The script calls (`EVALSHA`, `EVAL`) in `INFO commandstats` text.
fn script_calls(info: &str) -> u64 {
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split_once(":calls=").and_then(|(_, rest)| rest.split(',').next()))
        .map(|n| n.parse::<u64>().unwrap())
        .sum()
}

/// The script calls one durable message of a known chat costs on a private server, with the
/// coordinator made by the store or apart. The handler replies nothing, so the outbox is not
/// written.
async fn script_calls_per_durable_message(by_store: bool) -> f64 {
    const MESSAGES: usize = 20;
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(&server.url(), "d").await.unwrap();
    let coordinator = if by_store {
        store.coordinator(botmesh_core::traits::DEFAULT_LEASE)
    } else {
        RedisCoordinator::new(&server.url(), "d").await.unwrap()
    };
    assert_eq!(coordinator.turn_journal().is_some(), by_store);
    let provider = TestProvider::new();
    let bot = Bot::builder()
        .provider(provider.clone())
        .store(Arc::new(store.clone()))
        .coordination(CoordinationConfig::new(coordinator).build())
        .durability(Durability::new())
        .on_message(|_ctx| async { Ok::<_, BotError>(()) })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("chat", "warm");
    provider.settled(&bot).await;
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    for _ in 0..MESSAGES {
        // One at a time: each one's calls go alone, none shares a batch with another's.
        provider.say("chat", "x");
        provider.settled(&bot).await;
    }
    let calls = script_calls(&server.cli(&["INFO", "commandstats"]).unwrap());
    let journal = botmesh_core::traits::Store::journal(&store).unwrap();
    assert!(journal.inbox_pending(10).await.unwrap().is_empty(), "every message acknowledged");
    bot.stop().await.unwrap();
    calls as f64 / MESSAGES as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_message_is_journaled_with_its_ticket_and_acknowledged_with_its_release() {
    let together = script_calls_per_durable_message(true).await;
    let apart = script_calls_per_durable_message(false).await;
    // Together: the journaling ticket, and the acknowledging release. Apart: the append, the
    // ticket, the release and the acknowledgement.
    assert_eq!((together, apart), (2.0, 4.0));
}
