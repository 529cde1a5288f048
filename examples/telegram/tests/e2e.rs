//! The shop over Telegram, end to end against the Bot API stand-in: the persistent order flow
//! in both modes, and an order in progress surviving a restart.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use botmesh_testing::telegram::TelegramServer;
use telegram_shop::{Settings, bot};

const CHAT: i64 = 4242;

fn settings(server: &TelegramServer, sqlite: &std::path::Path) -> Settings {
    Settings {
        token: "777:shop".to_owned(),
        api_url: Some(server.api_url().parse().unwrap()),
        webhook: None,
        redis: None,
        sqlite: sqlite.to_string_lossy().into_owned(),
    }
}

/// Says each line and waits for the bot's answers to reach `answers` in all.
async fn say(server: &TelegramServer, lines: &[(&str, usize)]) -> Vec<String> {
    for (line, answers) in lines {
        server.user_says(CHAT, CHAT, line);
        server.wait_for_sent(CHAT, *answers, Duration::from_secs(15)).await;
    }
    server.sent_texts(CHAT)
}

fn db(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("botmesh-tg-{name}-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_over_long_polling_completes_and_survives_a_restart_halfway() {
    let server = TelegramServer::start().await.unwrap();
    let path = db("polling");
    let settings = settings(&server, &path);
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    let texts = say(&server, &[("order", 1), ("M", 2), ("2", 3), ("yes", 4)]).await;
    assert_eq!(texts[3], "Order placed: 2 x M for $24. That's order #1 for you. Thanks!");

    say(&server, &[("order", 5), ("L", 6)]).await;
    shop.stop().await.unwrap();
    // A new process on the same store picks the order up where it stopped.
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    let texts = say(&server, &[("3", 7), ("yes", 8)]).await;
    assert_eq!(texts[7], "Order placed: 3 x L for $42. That's order #2 for you. Thanks!");
    shop.stop().await.unwrap();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_over_webhooks_completes() {
    let server = TelegramServer::start().await.unwrap();
    let path = db("webhook");
    // The endpoint's address is the webhook URL: take a free port first.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut settings = settings(&server, &path);
    let url = format!("http://{addr}/telegram").parse().unwrap();
    settings.webhook = Some((url, "shop-secret".to_owned(), addr));
    let provider = settings.provider();
    let shop = bot(&settings, provider.clone()).await.unwrap();
    shop.start().await.unwrap();
    let serving = tokio::spawn(async move { provider.serve(addr).await });
    let texts = say(&server, &[("order", 1), ("S", 2), ("1", 3), ("yes", 4)]).await;
    assert_eq!(texts[3], "Order placed: 1 x S for $10. That's order #1 for you. Thanks!");
    let delivered = server.webhook_deliveries().iter().filter(|d| d.delivered()).count();
    assert_eq!(delivered, 4, "each update was posted to the endpoint and answered 200");
    shop.stop().await.unwrap();
    serving.await.unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
}
