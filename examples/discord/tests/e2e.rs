//! The shop over Discord, end to end against the Discord stand-in: the persistent order flow in
//! a DM and in a guild channel, and an order in progress surviving a restart.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::time::Duration;

use botmesh_testing::discord::{Author, DiscordServer};
use discord_shop::{Settings, bot};

fn settings(server: &DiscordServer, sqlite: &std::path::Path) -> Settings {
    Settings {
        token: server.token().to_owned(),
        proxy: Some(server.url()),
        redis: None,
        sqlite: sqlite.to_string_lossy().into_owned(),
    }
}

/// Waits until the bot's gateway session is live: what users say before that is lost, as on
/// Discord.
async fn connected(server: &DiscordServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while server.live_sessions() != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the bot never connected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `author` says each line in `channel` and waits for the bot's answers to reach `answers`.
async fn say(
    server: &DiscordServer,
    channel: u64,
    author: &Author,
    lines: &[(&str, usize)],
) -> Vec<String> {
    for (line, answers) in lines {
        server.user_says(channel, author, line);
        server.wait_for_sent(channel, *answers, Duration::from_secs(15)).await;
    }
    server.sent_texts(channel)
}

fn db(name: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("botmesh-discord-{name}-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_in_a_dm_completes_and_survives_a_restart_halfway() {
    let server = DiscordServer::start().await.unwrap();
    let path = db("dm");
    let settings = settings(&server, &path);
    let ana = Author::dm(4242, "ana");
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    connected(&server).await;
    let texts = say(&server, 77, &ana, &[("order", 1), ("M", 2), ("2", 3), ("yes", 4)]).await;
    assert_eq!(texts[3], "Order placed: 2 x M for $24. That's order #1 for you. Thanks!");

    say(&server, 77, &ana, &[("order", 5), ("L", 6)]).await;
    shop.stop().await.unwrap();
    assert_eq!(server.live_sessions(), 0, "the stop closed the gateway session");
    // A new process on the same store picks the order up where it stopped.
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    connected(&server).await;
    let texts = say(&server, 77, &ana, &[("3", 7), ("yes", 8)]).await;
    assert_eq!(texts[7], "Order placed: 3 x L for $42. That's order #2 for you. Thanks!");
    assert_eq!(server.max_live_sessions(), 1);
    shop.stop().await.unwrap();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_of_a_guild_channel_order_side_by_side() {
    let server = DiscordServer::start().await.unwrap();
    let path = db("guild");
    let settings = settings(&server, &path);
    let shop = bot(&settings, settings.provider()).await.unwrap();
    shop.start().await.unwrap();
    connected(&server).await;
    let (ana, bob) = (Author::in_guild(11, "ana", 500), Author::in_guild(12, "bob", 500));
    // Interleaved in one channel: each member has a conversation of their own.
    for (n, (who, line)) in
        [(&ana, "order"), (&bob, "order"), (&ana, "S"), (&bob, "L"), (&ana, "1"), (&bob, "2")]
            .into_iter()
            .enumerate()
    {
        server.user_says(9, who, line);
        server.wait_for_sent(9, n + 1, Duration::from_secs(15)).await;
    }
    server.user_says(9, &ana, "yes");
    server.user_says(9, &bob, "yes");
    let texts = server.wait_for_sent(9, 8, Duration::from_secs(15)).await;
    let mut placed: Vec<&str> = texts
        .iter()
        .map(|m| m.content.as_str())
        .filter(|t| t.starts_with("Order placed"))
        .collect();
    placed.sort_unstable();
    assert_eq!(
        placed,
        [
            "Order placed: 1 x S for $10. That's order #1 for you. Thanks!",
            "Order placed: 2 x L for $28. That's order #1 for you. Thanks!",
        ]
    );
    shop.stop().await.unwrap();
    let _ = std::fs::remove_file(&path);
}
