//! A leader that stops while the gateway is busy. Discord never delivers a message again, so
//! what the leader took from the gateway and could not answer (messages handed back at
//! `settle`, those that arrived while it drained, those still in its hands when its session
//! closed) must, with durability, be answered once by the next leader.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, Durability, MemoryStore};
use botmesh_testing::discord::{Author, DiscordServer};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// How long the bot works on each message: a chat's four messages outlast `SETTLE`.
const WORK: Duration = Duration::from_millis(200);
const SETTLE: Duration = Duration::from_millis(300);
const USERS: u64 = 5;

/// Two replicas of a slow echo bot on one hub and store, with durability when `durable`.
async fn two(server: &DiscordServer, durable: bool) -> Vec<Bot> {
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
        let coordination = CoordinationConfig::new(coordinator)
            .settle(SETTLE)
            .turn_wait(Duration::from_secs(10))
            .build();
        let mut builder = Bot::builder()
            .provider(discord(server))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .on_message(|ctx| async move {
                tokio::time::sleep(WORK).await;
                ctx.reply(format!("echo {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            });
        if durable {
            let durability = Durability::new().replay_every(Duration::from_millis(100));
            builder = builder.durability(durability);
        }
        let bot = builder.build().unwrap();
        bot.start().await.unwrap();
        replicas.push(bot);
    }
    replicas
}

/// Every user of the guild channel says `m<round>-<user>`.
fn say_round(server: &DiscordServer, round: u32) {
    for user in 1..=USERS {
        let author = Author::in_guild(user, format!("u{user}"), 500);
        server.user_says(7, &author, &format!("m{round}-{user}"));
    }
}

/// How many times each message of `rounds` was answered in the channel.
fn answers(server: &DiscordServer, rounds: u32) -> HashMap<String, usize> {
    let mut counts: HashMap<String, usize> = (0..rounds)
        .flat_map(|round| (1..=USERS).map(move |user| (format!("echo m{round}-{user}"), 0)))
        .collect();
    for text in server.sent_texts(7) {
        *counts.entry(text).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_what_a_stopping_leader_took_is_answered_once_by_the_next_leader() {
    let server = DiscordServer::start().await.unwrap();
    let replicas = two(&server, true).await;
    until("one replica holds the gateway", || {
        replicas.iter().any(|b| b.runs_transport("discord")) && server.live_sessions() == 1
    })
    .await;
    let old = replicas.iter().position(|b| b.runs_transport("discord")).unwrap();
    say_round(&server, 0);
    say_round(&server, 1);
    // The leader has taken the first rounds and works on them when its stop begins.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stopping = {
        let bot = replicas[old].clone();
        tokio::spawn(async move { bot.stop().await })
    };
    // Two more rounds reach the stopping leader's session while it drains.
    tokio::time::sleep(Duration::from_millis(20)).await;
    say_round(&server, 2);
    say_round(&server, 3);
    stopping.await.unwrap().unwrap();
    let new = 1 - old;
    until("the other replica holds the gateway", || replicas[new].runs_transport("discord")).await;
    wait_texts(&server, 7, 4 * USERS as usize).await;
    replicas[new].wait_idle().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = answers(&server, 4);
    assert!(counts.values().all(|n| *n == 1), "each message answered once: {counts:?}");
    assert_eq!(server.max_live_sessions(), 1, "never two gateway sessions at once");
    replicas[new].stop().await.unwrap();
}
