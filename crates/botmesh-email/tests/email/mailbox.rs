//! What the IMAP session does with mail that is not a plain message: malformed MIME, a
//! UIDVALIDITY change, a quarantine folder.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, Event, MemoryStore};
use botmesh_email::EmailProvider;
use botmesh_testing::email::{DovecotServer, SmtpSink};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// A mail with no sender: nobody to answer.
const NO_SENDER: &[u8] = b"Subject: broken\r\nMIME-Version: 1.0\r\n\
    Content-Type: multipart/mixed; boundary=\"never-closed\"\r\n\r\n--never-closed\r\n\
    Content-Type: text/plain\r\n\r\nhalf a mail\r\n";

/// Broken MIME: a multipart body whose parts cannot be told apart (no boundary).
const NO_BOUNDARY: &[u8] = b"From: Ana <ana@example.org>\r\nSubject: broken\r\n\
    Message-ID: <broken@example.org>\r\nMIME-Version: 1.0\r\n\
    Content-Type: multipart/mixed\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\nlost\r\n";

type Errors = Arc<Mutex<Vec<String>>>;

fn echo_bot(provider: EmailProvider, store: &Arc<dyn Store>) -> (Bot, Errors) {
    let errors: Errors = Arc::default();
    let seen = Arc::clone(&errors);
    let bot = Bot::builder()
        .provider(provider)
        .store(Arc::clone(store))
        .on(move |e| {
            if let Event::Error { .. } = e {
                seen.lock().unwrap().push(format!("{e:?}"));
            }
        })
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    (bot, errors)
}

fn mentions(errors: &Errors, word: &str) -> usize {
    errors.lock().unwrap().iter().filter(|e| e.contains(word)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_mail_is_reported_once_left_unseen_and_the_session_goes_on_past_it() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (bot, errors) = echo_bot(provider(&server, &sink), &store);
    bot.start().await.unwrap();
    server.deliver(NO_BOUNDARY).unwrap();
    server.deliver(&mail("ana@example.org", "ok1@x", "Hi", "after it", &[])).unwrap();
    assert_eq!(wait_texts(&sink, "ana@example.org", 1).await, ["echo after it"]);
    until("the malformed mail is reported", || mentions(&errors, "malformed") == 1).await;
    let flags = server.flags("INBOX").unwrap();
    assert_eq!(flags.len(), 2, "both mails are still in the mailbox: {flags:?}");
    assert!(!flags[0].1.contains("\\Seen"), "the malformed mail is kept unseen: {flags:?}");
    assert!(flags[1].1.contains("\\Seen"), "the good one is acknowledged: {flags:?}");
    bot.stop().await.unwrap();

    // A new session resumes after both: the malformed mail is neither reported nor stuck on.
    let (bot, again) = echo_bot(provider(&server, &sink), &store);
    bot.start().await.unwrap();
    server.deliver(&mail("ana@example.org", "ok2@x", "Hi", "later", &[])).unwrap();
    assert_eq!(wait_texts(&sink, "ana@example.org", 2).await[1], "echo later");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(mentions(&again, "malformed"), 0, "reported once, not at every start");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_mail_moves_to_the_quarantine_folder_when_one_is_set() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    server.create_mailbox("Quarantine").unwrap();
    let provider =
        EmailProvider::imap(imap(&server).quarantine("Quarantine".to_owned()), smtp(&sink));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (bot, errors) = echo_bot(provider, &store);
    bot.start().await.unwrap();
    server.deliver(NO_SENDER).unwrap();
    until("the malformed mail is reported", || mentions(&errors, "moved to Quarantine") == 1).await;
    assert_eq!(server.flags("Quarantine").unwrap().len(), 1);
    assert!(server.flags("INBOX").unwrap().is_empty());
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uidvalidity_change_is_reported_and_only_the_unacknowledged_mails_are_handled() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (bot, _) = echo_bot(provider(&server, &sink), &store);
    bot.start().await.unwrap();
    for i in 0..3 {
        server
            .deliver(&mail("bo@example.org", &format!("v{i}@x"), "Hi", &format!("old {i}"), &[]))
            .unwrap();
    }
    wait_texts(&sink, "bo@example.org", 3).await;
    bot.stop().await.unwrap();
    server.set_uid_validity("INBOX", 4242).unwrap();
    for i in 3..5 {
        server
            .deliver(&mail("bo@example.org", &format!("v{i}@x"), "Hi", &format!("new {i}"), &[]))
            .unwrap();
    }
    let (bot, errors) = echo_bot(provider(&server, &sink), &store);
    bot.start().await.unwrap();
    let texts = wait_texts(&sink, "bo@example.org", 5).await;
    assert_eq!(texts[3..], ["echo new 3", "echo new 4"]);
    until("the change is reported", || mentions(&errors, "UIDVALIDITY") == 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.texts_to("bo@example.org").len(), 5, "no old mail handled again");
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_over_the_size_limit_is_reported_and_left_unseen_without_being_downloaded() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let provider = EmailProvider::imap(imap(&server).max_mail_bytes(2000), smtp(&sink));
    let (bot, errors) = echo_bot(provider, &store);
    bot.start().await.unwrap();
    let big = "x".repeat(5000);
    server.deliver(&mail("ze@example.org", "big@x", "Hi", &big, &[])).unwrap();
    server.deliver(&mail("ze@example.org", "small@x", "Hi", "small", &[])).unwrap();
    assert_eq!(wait_texts(&sink, "ze@example.org", 1).await, ["echo small"]);
    until("the large mail is reported", || mentions(&errors, "too large") == 1).await;
    let flags = server.flags("INBOX").unwrap();
    assert!(!flags[0].1.contains("\\Seen"), "the large mail is left unseen: {flags:?}");
    assert!(flags[1].1.contains("\\Seen"), "the small one is acknowledged: {flags:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.texts_to("ze@example.org").len(), 1, "the large mail never reached the bot");
    bot.stop().await.unwrap();
}
