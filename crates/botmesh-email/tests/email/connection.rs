//! The IMAP connection: polling a server without IDLE, reconnecting after a cut, and a server
//! gone for long closing the transport so that the leader steps down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::{Bot, BotError, Event, FollowReason, TransportStatus};
use botmesh_testing::email::{DovecotServer, SmtpSink};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

type Events = Arc<Mutex<Vec<Event>>>;

fn echo(builder: botmesh_core::BotBuilder) -> (Bot, Events) {
    let events: Events = Arc::default();
    let kept = Arc::clone(&events);
    let bot = builder
        .on(move |e| kept.lock().unwrap().push(e.clone()))
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    (bot, events)
}

fn saw(events: &Events, wanted: impl Fn(&Event) -> bool) -> bool {
    events.lock().unwrap().iter().any(wanted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_idle_is_polled() {
    let server = DovecotServer::start_without_idle().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, _) = echo(Bot::builder().provider(provider(&server, &sink)));
    bot.start().await.unwrap();
    for i in 0..3 {
        server
            .deliver(&mail("po@example.org", &format!("p{i}@x"), "Hi", &format!("poll {i}"), &[]))
            .unwrap();
        // Each arrives while the session sleeps between two polls (200 ms apart).
        wait_texts(&sink, "po@example.org", i + 1).await;
    }
    assert_eq!(sink.texts_to("po@example.org"), ["echo poll 0", "echo poll 1", "echo poll 2"]);
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_made_again_and_no_mail_is_lost_or_repeated() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, _) = echo(Bot::builder().provider(provider(&server, &sink)));
    bot.start().await.unwrap();
    server.deliver(&mail("cu@example.org", "c1@x", "Hi", "one", &[])).unwrap();
    wait_texts(&sink, "cu@example.org", 1).await;
    server.kick().unwrap();
    server.deliver(&mail("cu@example.org", "c2@x", "Hi", "two", &[])).unwrap();
    server.kick().unwrap();
    server.deliver(&mail("cu@example.org", "c3@x", "Hi", "three", &[])).unwrap();
    wait_texts(&sink, "cu@example.org", 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.texts_to("cu@example.org"), ["echo one", "echo two", "echo three"]);
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_for_long_closes_the_transport_and_the_leader_steps_down() {
    let mut server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let coordination = CoordinationConfig::new(coordinator)
        .provider_down(Duration::from_millis(500))
        .step_down_pause(Duration::from_secs(60))
        .build();
    let (bot, events) =
        echo(Bot::builder().provider(provider(&server, &sink)).coordination(coordination));
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    server.halt();
    // Closed once the connection stayed lost for `down_after` (2 s here), then the step-down
    // rule hands the session on after `provider_down`.
    until("the transport is reported closed", || {
        saw(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. }))
    })
    .await;
    until("the leader steps down", || {
        saw(&events, |e| matches!(e, Event::Follower { reason: FollowReason::ProviderDown, .. }))
    })
    .await;
    assert!(!bot.runs_transport("email"), "stepped down: a standby may read the mailbox");
    server.restart().unwrap();
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_logs_in_over_tls_and_refuses_a_server_it_cannot_verify() {
    use botmesh_email::{EmailProvider, ImapConfig, Security};
    let server = DovecotServer::start_tls().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let tls = |config: ImapConfig| config.port(server.tls_port().unwrap()).security(Security::Tls);
    let trusted = tls(imap(&server)).root_certificates_pem(&server.ca_pem().unwrap()).unwrap();
    let (bot, _) = echo(Bot::builder().provider(EmailProvider::imap(trusted, smtp(&sink))));
    bot.start().await.unwrap();
    server.deliver(&mail("tl@example.org", "t1@x", "Hi", "secure", &[])).unwrap();
    assert_eq!(wait_texts(&sink, "tl@example.org", 1).await, ["echo secure"]);
    bot.stop().await.unwrap();
    // Without the private CA, the certificate is not trusted: the start fails.
    let untrusted = EmailProvider::imap(tls(imap(&server)), smtp(&sink));
    let (bot, _) = echo(Bot::builder().provider(untrusted));
    let started = bot.start().await;
    assert!(started.is_err(), "an unverified server is refused");
    let _ = bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mailbox_that_cannot_be_selected_fails_the_start_or_closes_the_transport() {
    use botmesh_email::EmailProvider;
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let missing = EmailProvider::imap(imap(&server).mailbox("Missing"), smtp(&sink));
    let (bot, _) = echo(Bot::builder().provider(missing));
    assert!(bot.start().await.is_err(), "a mailbox that does not exist fails the start");
    assert_eq!(server.sessions().unwrap(), 0, "the session that found out logged out");

    server.create_mailbox("Work").unwrap();
    let provider = EmailProvider::imap(imap(&server).mailbox("Work"), smtp(&sink));
    let (bot, events) = echo(Bot::builder().provider(provider));
    bot.start().await.unwrap();
    until("the transport opens", || {
        saw(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Open, .. }))
    })
    .await;
    server.delete_mailbox("Work").unwrap();
    server.kick().unwrap();
    // Logged in again, but every SELECT fails: retried with backoff, closed after
    // `down_after` (2 s here).
    until("the transport is reported closed", || {
        saw(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. }))
    })
    .await;
    assert!(server.sessions().unwrap() <= 1, "no pile of sessions left behind");
    bot.stop().await.unwrap();
}
