//! Long polling: rate limits, failover between replicas, a revoked token, a conflict, a stop
//! in the middle of a batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Provider, Store};
use botmesh_core::{Bot, BotError, Durability, Event, MemoryStore};
use botmesh_telegram::TelegramProvider;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_poller_records_what_the_bot_took_so_a_restart_is_not_handed_it_again() {
    // The stop lands somewhere in the first bot's batch, where it falls: several rounds, so
    // that some land between an update taken and the offset recorded.
    for round in 0..5 {
        let (took, handled) = stop_in_a_batch_then_restart().await;
        let expected: Vec<String> = (0..300).map(|n| format!("m{n}")).collect();
        assert_eq!(handled, expected, "round {round}: each handled once, {took} by the first bot");
    }
}

/// 300 updates wait at Telegram (three batches); a bot without a journal stops its transport as soon as it
/// handles one, then stops, and a new bot on the same store takes over. Returns how many the
/// first bot handled, and every update handled, sorted.
async fn stop_in_a_batch_then_restart() -> (usize, Vec<String>) {
    const UPDATES: usize = 300;
    let server = TelegramServer::start().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // Waiting before the bot starts: its first getUpdates brings them all. Each in a chat of
    // its own, so that the bot takes each one in a little longer.
    for n in 0..UPDATES {
        let chat = 1_000 + i64::try_from(n).unwrap();
        server.user_says(chat, chat, &format!("m{n}"));
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    // No journal: after a restart, only the recorded offset keeps the bot from handling an
    // update twice.
    let bot = |provider: TelegramProvider, stops: bool| {
        let seen = Arc::clone(&seen);
        let transport = provider.clone();
        Bot::builder()
            .provider(provider)
            .store(Arc::clone(&store))
            .on_message(move |ctx| {
                let (seen, transport) = (Arc::clone(&seen), transport.clone());
                async move {
                    let mut seen = seen.lock().unwrap();
                    if stops && seen.is_empty() {
                        // The transport stops while the loop still hands the batch over.
                        tokio::spawn(async move {
                            let _ = transport.stop().await;
                        });
                    }
                    seen.push(ctx.body().to_owned());
                    Ok::<_, BotError>(())
                }
            })
            .build()
            .unwrap()
    };
    let first = bot(polling(&server), true);
    first.start().await.unwrap();
    let deadline = Instant::now() + WITHIN;
    while seen.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the first bot handled nothing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.stop().await.unwrap();
    let took = seen.lock().unwrap().len();
    // The same store, a new process: it resumes after what the first one took.
    let second = bot(polling(&server), false);
    second.start().await.unwrap();
    while seen.lock().unwrap().len() < UPDATES {
        assert!(Instant::now() < deadline, "{} of {UPDATES} handled", seen.lock().unwrap().len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Long enough for a batch handed over again to arrive: the poll answers at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    second.stop().await.unwrap();
    let mut handled = seen.lock().unwrap().clone();
    handled.sort_by_key(|m| m[1..].parse::<usize>().unwrap());
    (took, handled)
}
