//! Long polling: rate limits, failover between replicas, a revoked token, a conflict.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Provider, Store};
use botmesh_core::{Bot, Durability, Event, MemoryStore};
use botmesh_testing::telegram::{Fault, TelegramServer};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn a_429_is_waited_out_and_the_reply_goes_out_once() {
    let server = TelegramServer::start().await.unwrap();
    let limited = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&limited);
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default())
        .on(move |e| {
            if let Event::RateLimited { retry_after, .. } = e {
                seen.lock().unwrap().push(*retry_after);
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.fail_next("sendMessage", Fault::TooManyRequests { retry_after: Duration::from_secs(1) });
    let t0 = Instant::now();
    server.user_says(3, 3, "hi");
    assert_eq!(wait_texts(&server, 3, 1).await, ["echo text hi"]);
    assert!(t0.elapsed() >= Duration::from_secs(1), "waited as asked: {:?}", t0.elapsed());
    assert_eq!(*limited.lock().unwrap(), [Duration::from_secs(1)]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.sent_texts(3).len(), 1, "sent once");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_poll_one_at_a_time_and_a_standby_takes_over_without_losing_or_repeating() {
    let server = TelegramServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(polling(&server))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let leader = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().position(|(_, b)| b.runs_transport("telegram"))
    };
    let deadline = Instant::now() + WITHIN;
    while leader(&replicas).is_none() {
        assert!(Instant::now() < deadline, "nobody polls");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for chat in 1..=5 {
        server.user_says(chat, chat, &format!("before {chat}"));
    }
    for chat in 1..=5 {
        wait_texts(&server, chat, 1).await;
    }
    let old = leader(&replicas).unwrap();
    let t0 = Instant::now();
    replicas[old].0.crash();
    // Said while nobody polls: Telegram holds them for the next poller.
    for chat in 1..=5 {
        server.user_says(chat, chat, &format!("after {chat}"));
    }
    // The standby polls within lease + lease / 3 of the crash (a little more for the clock).
    let deadline = Instant::now() + WITHIN;
    while !replicas.iter().enumerate().any(|(i, (_, b))| i != old && b.runs_transport("telegram")) {
        assert!(Instant::now() < deadline, "no standby took over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took_over = t0.elapsed();
    assert!(
        took_over <= LEASE + LEASE / 3 + Duration::from_millis(300),
        "took over after {took_over:?}"
    );
    for chat in 1..=5 {
        let texts = wait_texts(&server, chat, 2).await;
        assert_eq!(texts, [format!("echo text before {chat}"), format!("echo text after {chat}")]);
    }
    let took = t0.elapsed();
    let new = leader(&replicas).expect("a standby polls");
    assert_ne!(new, old);
    assert!(took <= LEASE + LEASE / 3 + Duration::from_secs(2), "answered after {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 10, "every update handled once");
    assert_eq!(server.max_pollers(), 1, "never two pollers at once");
    assert_eq!(server.conflicts(), 0);
    for (_, bot) in &replicas {
        bot.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_closes_the_poller_s_transport_and_its_leader_steps_down() {
    let server = TelegramServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let coordination = CoordinationConfig::new(coordinator)
        .provider_down(Duration::from_millis(500))
        .step_down_pause(Duration::from_secs(60))
        .build();
    let (builder, events) =
        recorded(Bot::builder().provider(polling(&server)).coordination(coordination));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    server.revoke_token();
    event(&events, |e| {
        matches!(e, Event::Transport { status: botmesh_core::TransportStatus::Closed, .. })
    })
    .await;
    event(&events, |e| {
        matches!(e, Event::Follower { reason: botmesh_core::FollowReason::ProviderDown, .. })
    })
    .await;
    assert!(!bot.runs_transport("telegram"), "stepped down: a standby may poll");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_webhook_set_elsewhere_is_a_conflict_that_closes_the_polling_transport() {
    use teloxide_core::payloads::setters::*;
    use teloxide_core::requests::{Request, Requester};
    let server = TelegramServer::start().await.unwrap();
    let provider = polling(&server);
    let (builder, events) = recorded(Bot::builder().provider(provider.clone()));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(1, 1, "hi");
    wait_texts(&server, 1, 1).await;
    let url = "https://elsewhere.example/hook".parse().unwrap();
    provider.client().set_webhook(url).secret_token("x").send().await.unwrap();
    event(&events, |e| {
        matches!(e, Event::Transport { status: botmesh_core::TransportStatus::Closed, .. })
    })
    .await;
    assert_eq!(provider.status(), botmesh_core::TransportStatus::Closed);
    bot.stop().await.unwrap();
}
