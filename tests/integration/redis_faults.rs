//! Redis faults under two replicas: killed connections, a paused server, a server restarted
//! empty, and thousands of chats leaving no keys behind. In every case nothing runs without
//! its turn, and every message is either handled or reported. The durable scenarios run twice:
//! with a coordinator made by the store (which writes the journal with its tickets and
//! releases) and with one apart.
//!
//! Kept whole: the scenarios share one private Redis server harness (kill, pause, restart)
//! and its helpers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{CasOutcome, CasStore, CheckpointWrite, Coordinator, Store};
use botmesh_core::{Bot, BotError, Durability, Event, Inbound};
use botmesh_redis_store::{RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::{RedisServer, TestProvider};
use tokio::time::Instant;

use crate::support::Recorder;

const LEASE: Duration = Duration::from_secs(1);

type Log = Arc<Mutex<Vec<(String, String, Instant, Instant)>>>;

struct Replica {
    bot: Bot,
    provider: TestProvider,
    rec: Recorder,
}

fn options(server: &RedisServer) -> RedisOptions {
    // Replies must fail well within a third of the lease for the stall rule to be timely.
    RedisOptions::new(&server.url(), "faults")
        .response_timeout(Duration::from_millis(250))
        .connection_timeout(Duration::from_millis(250))
}

async fn replica(server: &RedisServer, id: &str, log: &Log, work: Duration) -> Replica {
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(options(server)).await.unwrap());
    let coordinator = RedisCoordinator::connect(options(server))
        .await
        .unwrap()
        .with_replica_id(id)
        .with_lease(LEASE);
    let coordination =
        CoordinationConfig::new(coordinator).turn_wait(Duration::from_secs(3)).build();
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let log = Arc::clone(log);
    let name = id.to_owned();
    let bot = rec
        .attach(Bot::builder().provider(provider.clone()).store(store).coordination(coordination))
        .on_message(move |ctx| {
            let log = Arc::clone(&log);
            let name = name.clone();
            async move {
                let start = Instant::now();
                tokio::time::sleep(work).await;
                ctx.reply(format!("{name}:{}", ctx.body())).await?;
                log.lock().unwrap().push((
                    ctx.key().to_string(),
                    ctx.body().to_owned(),
                    start,
                    Instant::now(),
                ));
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    Replica { bot, provider, rec }
}

/// How a test's coordinator is made: by its store, writing the store's journal with its
/// tickets and releases, or apart, on a connection of its own.
#[derive(Clone, Copy)]
enum Made {
    ByStore,
    Apart,
}

/// A store and a coordinator (with lease [`LEASE`]) on `store` and `coordinator` options.
async fn store_and_coordinator(
    store: RedisOptions,
    coordinator: RedisOptions,
    made: Made,
) -> (Arc<dyn Store>, RedisCoordinator) {
    let redis = RedisStore::connect(store).await.unwrap();
    let coordinator = match made {
        Made::ByStore => {
            let coordinator = redis.coordinator(LEASE);
            assert!(coordinator.turn_journal().is_some(), "it writes the store's journal");
            coordinator
        }
        Made::Apart => RedisCoordinator::connect(coordinator).await.unwrap().with_lease(LEASE),
    };
    (Arc::new(redis), coordinator)
}

/// No two handlers of one chat overlapped.
fn assert_no_overlap(log: &Log) {
    let mut by_chat: HashMap<String, Vec<(Instant, Instant)>> = HashMap::new();
    for (key, _, start, end) in log.lock().unwrap().iter() {
        by_chat.entry(key.clone()).or_default().push((*start, *end));
    }
    for (key, mut spans) in by_chat {
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "two turns of {key} overlapped: {w:?}");
        }
    }
}

/// The messages `traffic` sent: (chat, body), every body unique.
type Sent = Vec<(String, String)>;

/// Every message sent through `replicas` was either answered or reported as an error, each on
/// its own: a message counts as answered when a reply to its chat carries its body, and the
/// messages of a chat left without an answer are at most the errors reported for that chat.
/// A message lost without a word fails this.
fn assert_handled_or_reported(replicas: &[&Replica], sent: &[(String, String)]) {
    let mut unanswered: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut answered = 0;
    for (chat, body) in sent {
        let replied = replicas.iter().any(|r| {
            r.provider.texts_to(chat).iter().any(|t| t.split_once(':').is_some_and(|t| t.1 == body))
        });
        if replied {
            answered += 1;
        } else {
            unanswered.entry(chat).or_default().push(body);
        }
    }
    for (chat, bodies) in &unanswered {
        let reported: usize = replicas
            .iter()
            .map(|r| {
                r.rec
                    .events()
                    .iter()
                    .filter(
                        |e| matches!(e, Event::Error { key: Some(k), .. } if k.as_str() == *chat),
                    )
                    .count()
            })
            .sum();
        assert!(
            bodies.len() <= reported,
            "{chat}: {bodies:?} neither answered nor reported ({reported} errors for the chat)"
        );
    }
    assert!(answered > 0, "the replicas answered nothing at all");
}

async fn traffic(a: &Replica, b: &Replica, chats: usize, rounds: usize) -> Sent {
    /// Numbers every message of the process, so that bodies never repeat.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut sent = Vec::new();
    for round in 0..rounds {
        for c in 0..chats {
            let r = if (round + c) % 2 == 0 { a } else { b };
            let (chat, body) =
                (format!("chat{c}"), format!("m{}", NEXT.fetch_add(1, Ordering::SeqCst)));
            r.provider.say(&chat, &body);
            sent.push((chat, body));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    sent
}

/// Waits until every replica is idle. Settling one replica can leave another with work it takes
/// on afterwards (a turn it waited for behind the first, a chat passed over to it), so replicas
/// are settled in turn until a whole pass sends and reports nothing new.
async fn settle(replicas: &[&Replica]) {
    let progress = || -> (usize, usize) {
        let sent = replicas.iter().map(|r| r.provider.sent_count()).sum();
        let events = replicas.iter().map(|r| r.rec.events().len()).sum();
        (sent, events)
    };
    // Bounded, so a replica that never goes quiet fails the test's assertions, not its clock.
    for _ in 0..50 {
        let before = progress();
        for r in replicas {
            r.provider.settled(&r.bot).await;
        }
        if progress() == before {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_killed_mid_turn_reconnect_and_the_chats_go_on() {
    let server = RedisServer::start().unwrap();
    let log: Log = Arc::default();
    let a = replica(&server, "a", &log, Duration::from_millis(100)).await;
    let b = replica(&server, "b", &log, Duration::from_millis(100)).await;
    let mut sent = traffic(&a, &b, 4, 3).await;
    server.cli(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap();
    sent.extend(traffic(&a, &b, 4, 3).await);
    settle(&[&a, &b]).await;
    assert_no_overlap(&log);
    assert_handled_or_reported(&[&a, &b], &sent);
    // After the reconnect the chats are fully usable again.
    let before = a.provider.sent_count() + b.provider.sent_count();
    let third = traffic(&a, &b, 4, 2).await;
    settle(&[&a, &b]).await;
    assert_eq!(
        a.provider.sent_count() + b.provider.sent_count(),
        before + third.len(),
        "every later message answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_past_the_lease_stops_every_turn_and_recovers() {
    let server = RedisServer::start().unwrap();
    let log: Log = Arc::default();
    let a = replica(&server, "a", &log, Duration::from_millis(50)).await;
    let b = replica(&server, "b", &log, Duration::from_millis(50)).await;
    let mut sent = traffic(&a, &b, 4, 2).await;
    server.pause().unwrap();
    sent.extend(traffic(&a, &b, 4, 2).await);
    tokio::time::sleep(LEASE * 2).await;
    server.resume().unwrap();
    settle(&[&a, &b]).await;
    assert_no_overlap(&log);
    assert_handled_or_reported(&[&a, &b], &sent);
    // Once Redis answers again, coordination recovers by itself.
    every_later_message_is_answered(&a, &b, &log, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_is_recovered_from_by_itself() {
    let mut server = RedisServer::start().unwrap();
    let log: Log = Arc::default();
    let a = replica(&server, "a", &log, Duration::from_millis(20)).await;
    let b = replica(&server, "b", &log, Duration::from_millis(20)).await;
    let mut sent = traffic(&a, &b, 4, 2).await;
    settle(&[&a, &b]).await;
    server.restart().unwrap();
    sent.extend(traffic(&a, &b, 4, 2).await);
    settle(&[&a, &b]).await;
    assert_handled_or_reported(&[&a, &b], &sent);
    every_later_message_is_answered(&a, &b, &log, 3).await;
}

/// A lease after a fault, traffic of 4 chats × `per_chat` messages is answered in full, and no
/// two turns of a chat overlapped.
async fn every_later_message_is_answered(a: &Replica, b: &Replica, log: &Log, per_chat: usize) {
    tokio::time::sleep(LEASE).await;
    let before = a.provider.sent_count() + b.provider.sent_count();
    let later = traffic(a, b, 4, per_chat).await;
    settle(&[a, b]).await;
    assert_eq!(
        a.provider.sent_count() + b.provider.sent_count(),
        before + later.len(),
        "every later message answered"
    );
    assert_no_overlap(log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_served_chats_leave_a_few_coordination_keys_per_replica() {
    let server = RedisServer::start().unwrap();
    let keep = Duration::from_millis(300);
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let opts = RedisOptions::new(&server.url(), "growth").idle_keep(keep);
        let coordinator = RedisCoordinator::connect(opts.clone())
            .await
            .unwrap()
            .with_replica_id(id)
            // A roomier lease: this test measures what is left behind, not the stall rule.
            .with_lease(LEASE * 5);
        let provider = TestProvider::new();
        let bot = Bot::builder()
            .provider(provider.clone())
            .store(Arc::new(RedisStore::connect(opts).await.unwrap()))
            .coordination(CoordinationConfig::new(coordinator).build())
            .on_message(|ctx| async move {
                ctx.reply("ok").await?;
                Ok::<_, BotError>(())
            })
            .build()
            .unwrap();
        bot.start().await.unwrap();
        replicas.push((bot, provider));
    }
    // In waves of a thousand chats: the test is about what stays behind, not about how a
    // burst of ten thousand scripts on a loaded two-core machine delays the heartbeats.
    for wave in 0..10 {
        for c in wave * 1000..(wave + 1) * 1000 {
            replicas[c % 2].1.say(&format!("chat{c}"), "hi");
        }
        for (bot, provider) in &replicas {
            provider.settled(bot).await;
        }
    }
    assert_eq!(replicas.iter().map(|r| r.1.sent_count()).sum::<usize>(), 10_000);
    tokio::time::sleep(keep * 4).await;
    let coordination_keys: Vec<String> = server
        .cli(&["--scan", "--pattern", "growth:[tqrl]:*"])
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        coordination_keys.len() <= 2 * 2,
        "a few coordination keys per live replica remain, not one per chat: {} left, e.g. {:?}",
        coordination_keys.len(),
        coordination_keys.iter().take(5).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_authenticates_and_never_shows_in_errors() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-pw"]).unwrap();
    let good = format!("redis://:s3cret-pw@127.0.0.1:{}/", server.port());
    let store = RedisStore::new(&good, "auth").await.unwrap();
    store.set_user_data("u", "{}").await.unwrap();
    assert_eq!(store.get_user_data("u").await.unwrap().as_deref(), Some("{}"));
    assert!(!format!("{store:?}").contains("s3cret-pw"), "Debug redacts the password");
    let bad = format!("redis://:wrong-pw@127.0.0.1:{}/", server.port());
    let err = RedisStore::new(&bad, "auth").await.unwrap_err();
    let text = format!(
        "{err} {err:?} {}",
        std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default()
    );
    assert!(!text.contains("wrong-pw"), "the password never shows in an error: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_rustls_carries_the_store_and_the_coordinator() {
    let server = RedisServer::start_tls().unwrap();
    let url = server.tls_url().unwrap();
    let options = RedisOptions::new(&url, "tls").tls_root_cert(server.ca_pem().unwrap());
    let store = RedisStore::connect(options.clone()).await.unwrap();
    store.set_user_data("u", r#"{"tls":true}"#).await.unwrap();
    assert_eq!(store.get_user_data("u").await.unwrap().as_deref(), Some(r#"{"tls":true}"#));
    let coordinator = RedisCoordinator::connect(options).await.unwrap();
    Coordinator::heartbeat(&coordinator, LEASE).await.unwrap();
    let ticket = Coordinator::take_ticket(&coordinator, &"c".into()).await.unwrap();
    assert!(ticket.grant.is_some(), "an uncontended ticket comes with its turn over TLS too");
    // Without the private CA the certificate is refused: verification is on.
    let untrusted = RedisStore::new(&url, "tls").await;
    assert!(untrusted.is_err(), "a server certificate from an unknown CA is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_refuses_what_it_cannot_journal_and_takes_the_sender_s_retry() {
    refused_then_retried(Made::Apart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_refuses_what_a_journaling_ticket_cannot_write_and_takes_the_sender_s_retry() {
    refused_then_retried(Made::ByStore).await;
}

async fn refused_then_retried(made: Made) {
    let mut server = RedisServer::start().unwrap();
    let (store, coordinator) =
        store_and_coordinator(options(&server), options(&server), made).await;
    let coordination = CoordinationConfig::new(coordinator).build();
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&handled);
    let bot = Bot::builder()
        .provider(TestProvider::new())
        .store(store)
        .coordination(coordination)
        .durability(Durability::new())
        .on_message(move |ctx| {
            seen.lock().unwrap().push(ctx.body().to_owned());
            async { Ok::<_, BotError>(()) }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let message = Inbound::text("webhook", "m1", "chat", "hello");

    server.kill();
    assert!(bot.accept(message.clone()).await.is_err(), "nothing could journal it");
    server.restart().unwrap();
    // The sender delivers it again until it is acknowledged, as a webhook sender does (the
    // replica also refuses deliveries while its leases, lapsed during the outage, are not
    // renewed yet).
    let deliver = || async {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match bot.accept(message.clone()).await {
                Ok(queued) => return queued,
                Err(e) => assert!(Instant::now() < deadline, "never accepted: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(
        deliver().await,
        botmesh_core::Accepted::Queued,
        "the refused delivery was forgotten, so the retry is taken"
    );
    assert_eq!(
        deliver().await,
        botmesh_core::Accepted::Duplicate,
        "a third delivery is a duplicate"
    );
    bot.wait_idle().await;
    assert_eq!(*handled.lock().unwrap(), ["hello"], "handled once");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn an_acknowledgement_redis_did_not_take_is_retried_until_it_lands() {
    acknowledgement_retried(Made::Apart).await;
}

#[tokio::test]
async fn an_acknowledgement_that_rode_a_failed_release_is_retried_until_it_lands() {
    acknowledgement_retried(Made::ByStore).await;
}

async fn acknowledgement_retried(made: Made) {
    // Kept on disk, so that what Redis held before the crash is there after it.
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let server = Arc::new(Mutex::new(server.unwrap()));
    let (store_options, coordinator_options) = {
        let s = server.lock().unwrap();
        (options(&s), options(&s))
    };
    let (store, coordinator) =
        store_and_coordinator(store_options, coordinator_options, made).await;
    let coordination = CoordinationConfig::new(coordinator).build();
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let (seen, crash) = (Arc::clone(&handled), Arc::clone(&server));
    let bot = Bot::builder()
        .provider(TestProvider::new())
        .store(Arc::clone(&store))
        .coordination(coordination)
        .durability(Durability::new().replay_every(Duration::from_millis(200)))
        .on_message(move |ctx| {
            seen.lock().unwrap().push(ctx.body().to_owned());
            // Redis goes down once the message is handled, before its acknowledgement.
            crash.lock().unwrap().kill();
            async { Ok::<_, BotError>(()) }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    assert_eq!(
        bot.accept(Inbound::text("webhook", "m1", "chat", "hello")).await.unwrap(),
        botmesh_core::Accepted::Queued
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while handled.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "never handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The acknowledgement fails meanwhile; Redis comes back with the message still pending.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.lock().unwrap().restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match store.journal().unwrap().inbox_pending(10).await {
            Ok(pending) if pending.is_empty() => break,
            Ok(pending) => assert!(Instant::now() < deadline, "still pending: {pending:?}"),
            Err(e) => assert!(Instant::now() < deadline, "Redis never came back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(*handled.lock().unwrap(), ["hello"], "acknowledged, and handled once");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_read_or_idempotent_write_whose_connection_drops_under_it_is_sent_again() {
    let server = RedisServer::start().unwrap();
    let proxy = CuttingProxy::start(server.port()).await;
    let store = RedisStore::new(&proxy.url(), "cut").await.unwrap();
    store.set_user_data("u", "v").await.unwrap();
    proxy.cut_next(1);
    assert_eq!(store.get_user_data("u").await.unwrap().as_deref(), Some("v"));
    proxy.cut_next(1);
    store.set_user_data("u", "w").await.unwrap();
    assert_eq!(proxy.cuts(), 2, "both commands met a dropped connection");
    assert_eq!(store.get_user_data("u").await.unwrap().as_deref(), Some("w"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_write_whose_connection_drops_lands_once_and_says_so() {
    let server = RedisServer::start().unwrap();
    let proxy = CuttingProxy::start(server.port()).await;
    let store = RedisStore::new(&proxy.url(), "cut").await.unwrap();
    let write = |data: &str| CheckpointWrite::new(data);
    let CasOutcome::Written { revision: first } =
        store.set_checkpoint_if("c", &write("one"), None).await.unwrap()
    else {
        panic!("the first write lands");
    };

    // Dropped before it reached Redis: sent again, and it lands.
    proxy.cut_next(1);
    let CasOutcome::Written { revision: second } =
        store.set_checkpoint_if("c", &write("two"), Some(first)).await.unwrap()
    else {
        panic!("the write is sent again and lands");
    };
    let now = store.get_checkpoint("c").await.unwrap().unwrap();
    assert_eq!((now.data.as_str(), now.revision), ("two", second));

    // Landed, but its reply was lost with the connection: recognised, not refused.
    proxy.cut_reply_next(1);
    let CasOutcome::Written { revision: third } =
        store.set_checkpoint_if("c", &write("three"), Some(second)).await.unwrap()
    else {
        panic!("a write that landed is not taken for a conflict");
    };
    let now = store.get_checkpoint("c").await.unwrap().unwrap();
    assert_eq!((now.data.as_str(), now.revision), ("three", third));
    assert_eq!(proxy.cuts(), 2);

    // A newer owner's write is still refused after a drop.
    store.set_checkpoint_if("c", &write("newer"), Some(third)).await.unwrap();
    proxy.cut_next(1);
    let stale = store.set_checkpoint_if("c", &write("stale"), Some(third)).await.unwrap();
    assert!(matches!(stale, CasOutcome::Conflict { .. }), "{stale:?}");
}

/// A TCP proxy in front of Redis that, on demand, closes the connection the next command
/// arrives on instead of forwarding it: the client sees its connection drop mid-request.
struct CuttingProxy {
    port: u16,
    to_cut: Arc<std::sync::atomic::AtomicU32>,
    replies_to_cut: Arc<std::sync::atomic::AtomicU32>,
    cut: Arc<std::sync::atomic::AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl CuttingProxy {
    async fn start(upstream: u16) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (to_cut, cut) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let replies_to_cut = Arc::new(AtomicU32::new(0));
        let (to_cut2, cut2, replies2) =
            (Arc::clone(&to_cut), Arc::clone(&cut), Arc::clone(&replies_to_cut));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let (to_cut, cut, replies) =
                    (Arc::clone(&to_cut2), Arc::clone(&cut2), Arc::clone(&replies2));
                tokio::spawn(async move {
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    // Replies go back to the client until the connection is muted.
                    let muted = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let mute = Arc::clone(&muted);
                    let back = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = server_read.read(&mut buf).await {
                            if n == 0 || mute.load(Ordering::SeqCst) {
                                break;
                            }
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        // The client's side stays open until the connection is cut as a whole.
                        std::future::pending::<()>().await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let take = |flag: &AtomicU32| {
                            flag.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                                c.checked_sub(1)
                            })
                            .is_ok()
                        };
                        if take(&to_cut) {
                            cut.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        let cut_reply = take(&replies);
                        if cut_reply {
                            // Nothing more reaches the client: the command runs, its reply
                            // is lost with the connection.
                            muted.store(true, Ordering::SeqCst);
                        }
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if cut_reply {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            cut.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                    }
                    // Dropping both halves closes the client's connection.
                    back.abort();
                });
            }
        });
        Self { port, to_cut, replies_to_cut, cut, task }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Cuts the connections the next `count` commands arrive on.
    fn cut_next(&self, count: u32) {
        self.to_cut.store(count, Ordering::SeqCst);
    }

    /// Forwards the next `count` commands, then cuts their connections before the replies.
    fn cut_reply_next(&self, count: u32) {
        self.replies_to_cut.store(count, Ordering::SeqCst);
    }

    /// How many connections were cut so far.
    fn cuts(&self) -> u32 {
        self.cut.load(Ordering::SeqCst)
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Kills every client connection of `server`, as a proxy reaping idle connections or a
/// failover would.
fn drop_connections(server: &RedisServer) {
    server.cli(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_the_message_path_rides_out_a_dropped_connection() {
    dropped_connections(Made::Apart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_journaling_call_on_the_message_path_rides_out_a_dropped_connection() {
    dropped_connections(Made::ByStore).await;
}

async fn dropped_connections(made: Made) {
    let server = RedisServer::start().unwrap();
    let (store, coordinator) =
        store_and_coordinator(options(&server), options(&server), made).await;
    let coordination =
        CoordinationConfig::new(coordinator).turn_wait(Duration::from_secs(10)).build();
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let form = botmesh_core::Flow::new("form")
        .trigger(botmesh_core::Trigger::keyword("form"))
        .persistent()
        .do_step("fill", |c| async move {
            let answer = c.ask("Name?").await?;
            // Works long enough for the connections to drop under the step.
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.send(format!("hello {}", answer.body)).await?;
            Ok::<_, BotError>(botmesh_core::Step::Next)
        });
    let bot = rec
        .attach(Bot::builder().provider(provider.clone()).store(store.clone()))
        .coordination(coordination)
        .durability(Durability::new())
        .flow(form)
        .on_message(|ctx| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            ctx.reply(format!("did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let accept = |id: &str, text: &str| bot.accept(Inbound::text("test", id, "c", text));
    let mut expected = Vec::new();
    // The connections drop right before a message, a second before, and five seconds before
    // (idle): its journal append and its ticket are the first calls on the dead connections.
    for (i, gap) in [0, 1000, 5000].into_iter().enumerate() {
        drop_connections(&server);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        assert_eq!(
            accept(&format!("m{i}"), &format!("before {i}")).await.unwrap(),
            botmesh_core::Accepted::Queued
        );
        expected.push(format!("did before {i}"));
        provider.wait_sent(expected.len()).await;
    }
    // They drop while the handler works: the release and the acknowledgement meet them.
    assert_eq!(accept("m3", "during").await.unwrap(), botmesh_core::Accepted::Queued);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop_connections(&server);
    expected.push("did during".to_owned());
    provider.wait_sent(expected.len()).await;
    // They drop while a step works: its checkpoint write and the release meet them.
    assert_eq!(accept("m4", "form").await.unwrap(), botmesh_core::Accepted::Queued);
    expected.push("Name?".to_owned());
    provider.wait_sent(expected.len()).await;
    assert_eq!(accept("m5", "Ann").await.unwrap(), botmesh_core::Accepted::Queued);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop_connections(&server);
    expected.push("hello Ann".to_owned());
    provider.wait_sent(expected.len()).await;
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), expected, "each message answered once, in order");
    assert!(rec.errors().is_empty(), "nothing failed: {:?}", rec.errors());
    assert!(
        store.journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "every message acknowledged"
    );
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "the flow ended");
}

/// A delivery refused because Redis froze, whose append sat in the frozen server's buffer and
/// landed only once it thawed, long after every look the refusing replica made while Redis
/// did not answer. The sender delivers again to the other replica, as a load balancer does:
/// the refusing replica, alive throughout, must still give the record up, so that a delivery
/// takes it and it is answered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_whose_append_lands_after_a_long_freeze_is_answered_by_a_later_delivery()
{
    // Long enough that the refusing replica stays alive through the freeze: only it may give
    // its record up.
    const LONG_LEASE: Duration = Duration::from_secs(30);
    // Longer than the looks at whether the append landed (about five seconds).
    const FROZEN: Duration = Duration::from_secs(8);
    let server = RedisServer::start().unwrap();
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut bots = Vec::new();
    for id in ["a", "b"] {
        let store: Arc<dyn Store> = Arc::new(RedisStore::connect(options(&server)).await.unwrap());
        let coordinator = RedisCoordinator::connect(options(&server))
            .await
            .unwrap()
            .with_replica_id(id)
            .with_lease(LONG_LEASE);
        let seen = Arc::clone(&handled);
        let bot = Bot::builder()
            .provider(TestProvider::new())
            .store(store)
            .coordination(CoordinationConfig::new(coordinator).build())
            .durability(Durability::new())
            .on_message(move |ctx| {
                seen.lock().unwrap().push(format!("{id}:{}", ctx.body()));
                async { Ok::<_, BotError>(()) }
            })
            .build()
            .unwrap();
        bot.start().await.unwrap();
        bots.push(bot);
    }
    let message = Inbound::text("webhook", "m1", "chat", "hello");

    server.pause().unwrap();
    assert!(bots[0].accept(message.clone()).await.is_err(), "Redis is frozen");
    tokio::time::sleep(FROZEN).await;
    server.resume().unwrap();

    // The sender tries the other replica until one acknowledges.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match bots[1].accept(message.clone()).await {
            Ok(accepted) => {
                assert_eq!(accepted, botmesh_core::Accepted::Queued, "taken by this delivery");
                break;
            }
            Err(e) => assert!(
                Instant::now() < deadline,
                "the record stays with the replica that refused it: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bots[1].wait_idle().await;
    assert_eq!(*handled.lock().unwrap(), ["b:hello"], "answered once");
    for bot in &bots {
        bot.stop().await.unwrap();
    }
}
