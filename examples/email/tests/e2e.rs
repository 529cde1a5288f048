//! The shop by e-mail, end to end against a private Dovecot and an SMTP sink: the persistent
//! order flow over IMAP, surviving a restart halfway, and over the ingest endpoint.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::time::Duration;

use botmesh_email::{ImapConfig, SECRET_HEADER, Security, SmtpConfig};
use botmesh_testing::email::{DovecotServer, SmtpSink};
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use email_shop::{Settings, bot};
use tower::ServiceExt;

const ANA: &str = "ana@example.org";

fn db(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("botmesh-mail-{name}-{}.db", std::process::id()));
    remove(&path);
    path
}

/// Removes the database and SQLite's journal files beside it.
fn remove(path: &std::path::Path) {
    for suffix in ["", "-shm", "-wal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

fn settings(imap: Option<&DovecotServer>, sink: &SmtpSink, sqlite: &std::path::Path) -> Settings {
    let smtp = SmtpConfig::new(sink.host(), "shop@example.org")
        .port(sink.port())
        .security(Security::Plain);
    Settings {
        imap: imap.map(|s| {
            ImapConfig::new(s.host(), s.user(), s.password())
                .port(s.port())
                .security(Security::Plain)
        }),
        ingest: match imap {
            Some(_) => None,
            None => Some(("s3cret".to_owned(), "127.0.0.1:0".parse().unwrap())),
        },
        smtp,
        redis: None,
        sqlite: sqlite.to_string_lossy().into_owned(),
    }
}

/// A mail from Ana, with a quote of the bot's last question below her answer.
fn mail(n: usize, text: &str) -> Vec<u8> {
    format!(
        "From: Ana <{ANA}>\r\nTo: shop@example.org\r\nSubject: T-shirt\r\nMessage-ID: <a{n}@example.org>\r\n\
         Content-Type: text/plain\r\n\r\n{text}\r\n\r\nOn Fri, Shop <shop@example.org> wrote:\r\n> (the last question)\r\n"
    )
    .into_bytes()
}

async fn wait(sink: &SmtpSink, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let texts = sink.texts_to(ANA);
        if texts.len() >= n {
            return texts;
        }
        assert!(tokio::time::Instant::now() < deadline, "got {texts:?}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_by_imap_completes_and_survives_a_restart_halfway() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let path = db("imap");
    let settings = settings(Some(&server), &sink, &path);
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    server.deliver(&mail(1, "order")).unwrap();
    wait(&sink, 1).await;
    server.deliver(&mail(2, "M")).unwrap();
    wait(&sink, 2).await;
    shop.stop().await.unwrap();
    // A new process on the same store and mailbox picks the order up where it stopped.
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    server.deliver(&mail(3, "2")).unwrap();
    wait(&sink, 3).await;
    server.deliver(&mail(4, "yes")).unwrap();
    let texts = wait(&sink, 4).await;
    assert_eq!(texts[3], "Order placed: 2 x M for $24. That's order #1 for you. Thanks!");
    let last = &sink.mails_to(ANA)[3];
    assert_eq!(last.header("Subject").as_deref(), Some("Re: T-shirt"));
    assert_eq!(last.header("In-Reply-To").as_deref(), Some("<a4@example.org>"));
    shop.stop().await.unwrap();
    drop(shop);
    remove(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_by_ingest_completes() {
    let sink = SmtpSink::start().await.unwrap();
    let path = db("ingest");
    let settings = settings(None, &sink, &path);
    let provider = settings.provider();
    let router = provider.router();
    let shop = bot(&settings, provider).await.unwrap();
    shop.start().await.unwrap();
    for (n, text) in ["order", "S", "3", "yes"].into_iter().enumerate() {
        let request = Request::post("/email")
            .header(SECRET_HEADER, "s3cret")
            .body(Body::from(mail(n, text)))
            .unwrap();
        let status = router.clone().oneshot(request).await.unwrap().status();
        assert_eq!(status.as_u16(), 200, "taken");
        wait(&sink, n + 1).await;
    }
    let texts = sink.texts_to(ANA);
    assert_eq!(texts[3], "Order placed: 3 x S for $30. That's order #1 for you. Thanks!");
    shop.stop().await.unwrap();
    drop(shop);
    remove(&path);
}
