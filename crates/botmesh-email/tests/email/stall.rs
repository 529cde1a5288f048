//! A server that stops answering without closing anything (a frozen process, a network that
//! drops packets): every IMAP command has a timeout, so the session is dropped, the transport
//! reported closed, and `stop` does not wait for the server. And a server that drops every
//! session right after its `SELECT` counts as down.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::Provider;
use botmesh_core::{Bot, BotError, Event, TransportStatus};
use botmesh_email::EmailProvider;
use botmesh_testing::email::{DovecotServer, SmtpSink};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// What the proxy does: forward, ...
const FORWARD: u8 = 0;
/// ... swallow what arrives and hold both sockets open, as a frozen peer would, ...
const SILENT: u8 = 1;
/// ... or close the connection right after the server's answer to `SELECT`.
const CUT_AFTER_SELECT: u8 = 2;

/// Copies `from` to `to` as `mode` says.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mode: Arc<AtomicU8>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mode = mode.load(Ordering::SeqCst);
        if mode == SILENT {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        let selected = buf[..n].windows(16).any(|w| w == b"Select completed");
        if mode == CUT_AFTER_SELECT && selected {
            return;
        }
    }
}

/// A loopback proxy to the server on `port`; returns its port and its mode switch.
async fn proxy(port: u16) -> (u16, Arc<AtomicU8>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let own = listener.local_addr().unwrap().port();
    let silent = Arc::new(AtomicU8::new(FORWARD));
    let switch = Arc::clone(&silent);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else { continue };
            let (client_in, client_out) = client.into_split();
            let (server_in, server_out) = server.into_split();
            tokio::spawn(pipe(client_in, server_out, Arc::clone(&switch)));
            tokio::spawn(pipe(server_in, client_out, Arc::clone(&switch)));
        }
    });
    (own, silent)
}

type Events = Arc<Mutex<Vec<Event>>>;

/// An echo bot reading `server` through a proxy, its provider, its events and the proxy's
/// mode switch; each IMAP command may take 1 s, and IDLE is renewed after `idle`.
async fn behind_proxy(
    server: &DovecotServer,
    sink: &SmtpSink,
    idle: Duration,
) -> (Bot, EmailProvider, Events, Arc<AtomicU8>) {
    let (port, silent) = proxy(server.port()).await;
    let config = imap(server).port(port).command_timeout(Duration::from_secs(1)).idle_timeout(idle);
    let provider =
        EmailProvider::imap(config, smtp(sink)).with_stop_timeout(Duration::from_millis(400));
    let events: Events = Arc::default();
    let kept = Arc::clone(&events);
    let bot = Bot::builder()
        .provider(provider.clone())
        .on(move |e| kept.lock().unwrap().push(e.clone()))
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.deliver(&mail("st@example.org", "s1@x", "Hi", "one", &[])).unwrap();
    assert_eq!(wait_texts(sink, "st@example.org", 1).await, ["echo one"]);
    (bot, provider, events, silent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_closes_the_transport() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, _, events, silent) = behind_proxy(&server, &sink, Duration::from_secs(1)).await;
    // Let the session settle in IDLE, then freeze the server.
    tokio::time::sleep(Duration::from_millis(200)).await;
    silent.store(SILENT, Ordering::SeqCst);
    let t0 = Instant::now();
    until("the transport is reported closed", || {
        let events = events.lock().unwrap();
        events.iter().any(|e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. }))
    })
    .await;
    // IDLE renewed after 1 s, DONE unanswered for 1 s, then logins whose greeting never
    // comes (1 s each) until `down_after` (2 s) passed: about 5 s.
    let closed = t0.elapsed();
    eprintln!("closed {closed:?} after the server froze");
    assert!(closed < Duration::from_secs(10), "closed after {closed:?}");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_lets_go_of_a_frozen_server_within_its_timeout() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, provider, _, silent) = behind_proxy(&server, &sink, Duration::from_secs(600)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    silent.store(SILENT, Ordering::SeqCst);
    // The session waits in IDLE: leaving it gets no answer, and neither would LOGOUT.
    let t0 = Instant::now();
    Provider::stop(&provider).await.unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(1500), "stop took {took:?}, its timeout is 400 ms");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_drops_every_session_after_its_select_closes_the_transport() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, _, events, mode) = behind_proxy(&server, &sink, Duration::from_secs(600)).await;
    mode.store(CUT_AFTER_SELECT, Ordering::SeqCst);
    server.kick().unwrap();
    // Each new session logs in and selects the mailbox, then is cut: not a working session,
    // so the transport closes after `down_after` (2 s) instead of flapping open.
    until("the transport is reported closed", || {
        let events = events.lock().unwrap();
        events.iter().any(|e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. }))
    })
    .await;
    bot.stop().await.unwrap();
}
