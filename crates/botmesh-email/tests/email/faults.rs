//! A server that refuses a command with `NO`, or freezes during IDLE, through
//! `botmesh-testing`'s `ImapProxy` in front of the private Dovecot: the refusal is reported as
//! a retryable provider error and retried, the freeze noticed within `stall_timeout`, and each
//! mail is handled once either way, never skipped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::{ErrorKind, Recovery};
use botmesh_core::{Bot, BotError, Event};
use botmesh_email::{EmailProvider, ImapConfig};
use botmesh_testing::email::{DovecotServer, ImapProxy, SmtpSink};
use tokio::time::Instant;

use crate::logs;
#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// An echo bot whose provider `id` reads `server` through a new proxy, with `config` made from
/// the usual test settings; returns once the bot answered a first mail from `from`, so the
/// session waits in IDLE.
async fn through_proxy(
    id: &str,
    server: &DovecotServer,
    sink: &SmtpSink,
    from: &str,
    config: impl FnOnce(ImapConfig) -> ImapConfig,
) -> (Bot, ImapProxy, Arc<Mutex<Vec<Event>>>) {
    logs::capture();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let proxy = ImapProxy::start(server.port()).await.unwrap();
    let imap = config(imap(server).port(proxy.port()));
    let provider = EmailProvider::imap(imap, smtp(sink)).with_id(id);
    let bot = Bot::builder()
        .provider(provider)
        .on(move |e| seen.lock().unwrap().push(e.clone()))
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.deliver(&mail(from, &format!("{id}-1@x"), "Hi", "one", &[])).unwrap();
    assert_eq!(wait_texts(sink, from, 1).await, ["echo one"]);
    // Settled in IDLE.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (bot, proxy, events)
}

/// The retryable provider errors the bot reported, each with its causes.
fn provider_errors(events: &Mutex<Vec<Event>>) -> Vec<String> {
    let events = events.lock().unwrap();
    let retried =
        |e: &BotError| e.kind() == Some(ErrorKind::Provider) && e.recovery() == Recovery::Retry;
    events
        .iter()
        .filter_map(|e| match e {
            Event::Error { error, .. } if retried(error) => {
                // The error and its causes, as a log line would show them.
                let mut text = error.to_string();
                let mut cause = std::error::Error::source(&**error);
                while let Some(c) = cause {
                    text.push_str(": ");
                    text.push_str(&c.to_string());
                    cause = c.source();
                }
                Some(text)
            }
            _ => None,
        })
        .collect()
}

/// Whether every mail of the INBOX is flagged `\Seen`.
fn all_seen(server: &DovecotServer, count: usize) -> bool {
    let flags = server.flags("INBOX").unwrap();
    flags.len() == count && flags.iter().all(|(_, f)| f.contains("\\Seen"))
}

/// Delivers a second mail from `from` while the proxy refuses the next `command`, and checks
/// that the refusal was logged as a retryable provider error naming the command, and that the
/// mail was handled once and flagged `\Seen`.
async fn refused(id: &str, command: &str, from: &str) {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let (bot, proxy, events) = through_proxy(id, &server, &sink, from, |c| c).await;
    proxy.refuse_next(command);
    server.deliver(&mail(from, &format!("{id}-2@x"), "Hi", "two", &[])).unwrap();
    // The session is woken in IDLE, sends the command, and is refused.
    until("the command is refused", || proxy.refused() == 1).await;
    assert_eq!(wait_texts(&sink, from, 2).await, ["echo one", "echo two"]);
    until("both mails are flagged \\Seen", || all_seen(&server, 2)).await;
    let warned = logs::warnings_of(id);
    let refusal = warned.iter().find(|l| l.contains(command) && l.contains("NO"));
    let refusal = refusal.unwrap_or_else(|| panic!("no warning names the refusal: {warned:#?}"));
    eprintln!("{refusal}");
    assert!(refusal.contains("kind=provider") && refusal.contains("recovery=Retry"), "{refusal}");
    assert!(!warned.iter().any(|l| l.contains(server.password())), "{warned:#?}");
    let reported = provider_errors(&events);
    assert!(
        reported.iter().any(|e| e.contains(command) && e.contains("NO")),
        "the bot's operators see it as an error event: {reported:#?}"
    );
    // Nothing more comes: the mail was handled once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.texts_to(from), ["echo one", "echo two"]);
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_search_is_reported_retried_and_its_mail_handled_once() {
    refused("refused-search", "UID SEARCH", "rs@example.org").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fetch_is_reported_retried_and_its_mail_not_skipped() {
    refused("refused-fetch", "UID FETCH", "rf@example.org").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_store_is_reported_retried_and_its_mail_flagged_and_handled_once() {
    refused("refused-store", "UID STORE", "rt@example.org").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_frozen_during_idle_is_noticed_within_the_stall_timeout_and_no_mail_is_lost() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let from = "fz@example.org";
    // IDLE is renewed after the default 10 minutes: only the stall timeout can notice.
    let stall = Duration::from_secs(2);
    let (bot, proxy, events) =
        through_proxy("frozen", &server, &sink, from, |c| c.stall_timeout(stall)).await;
    let before = proxy.connections();
    proxy.freeze();
    let t0 = Instant::now();
    // Delivered while the session's connection is frozen: only a new session can see it.
    server.deliver(&mail(from, "frozen-2@x", "Hi", "two", &[])).unwrap();
    until("the session connects again", || proxy.connections() > before).await;
    let noticed = t0.elapsed();
    eprintln!("noticed the frozen server after {noticed:?}");
    // Noticed within the stall timeout (2 s), then the first reconnect pause (100 ms). The
    // bound leaves 8 s for a loaded two-core machine, and is still far below the 10 minutes
    // of an IDLE renewal.
    assert!(noticed < stall + Duration::from_secs(8), "noticed after {noticed:?}");
    let reported = provider_errors(&events);
    assert!(!reported.is_empty(), "the freeze is an error event for the operators");
    assert_eq!(wait_texts(&sink, from, 2).await, ["echo one", "echo two"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.texts_to(from), ["echo one", "echo two"]);
    bot.stop().await.unwrap();
}
