//! The gateway session's life on one replica: invalid sessions, reconnect requests, the
//! session start limit, and what was read from the gateway when the bot cannot take it.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::{Bot, Event, TransportStatus};
use botmesh_testing::discord::{Author, DiscordServer};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

async fn echo_bot(server: &DiscordServer) -> (Bot, Arc<std::sync::Mutex<Vec<Event>>>) {
    let (builder, events) = recorded(Bot::builder().provider(discord(server)));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    until("the session is live", || server.live_sessions() == 1).await;
    (bot, events)
}

fn statuses(events: &Arc<std::sync::Mutex<Vec<Event>>>) -> Vec<TransportStatus> {
    let events = events.lock().unwrap();
    events
        .iter()
        .filter_map(|e| match e {
            Event::Transport { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_invalid_session_closes_the_transport_until_a_new_session_is_ready() {
    // Heartbeats every 200 ms, so that Discord acknowledged one before the session ends: the
    // next session then opens at READY (after a session on which none was acknowledged, it
    // would open at its first acknowledged heartbeat instead).
    let server = DiscordServer::builder()
        .heartbeat_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let (bot, events) = echo_bot(&server).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let invalidated = Instant::now();
    server.invalidate_sessions(false);
    until("a new session identifies", || server.identifies().len() == 2).await;
    // Discord asks for a random 1 to 5 s before identifying again.
    let waited = server.identifies()[1] - invalidated;
    assert!(waited >= Duration::from_secs(1), "identified again after {waited:?}");
    until("the new session is live", || server.live_sessions() == 1).await;
    until("the transport reopened", || statuses(&events).len() >= 3).await;
    assert_eq!(
        statuses(&events)[..3],
        [TransportStatus::Open, TransportStatus::Closed, TransportStatus::Open]
    );
    server.user_says(7, &Author::dm(11, "ana"), "still here");
    assert_eq!(wait_texts(&server, 7, 1).await, ["echo text still here"]);
    assert_eq!(server.max_live_sessions(), 1);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_reconnect_request_resumes_the_session_without_identifying_again() {
    let server = DiscordServer::start().await.unwrap();
    let (bot, _) = echo_bot(&server).await;
    server.request_reconnect();
    until("the session resumed", || server.resumes() == 1 && server.live_sessions() == 1).await;
    assert_eq!(server.identifies().len(), 1);
    server.user_says(7, &Author::dm(11, "ana"), "after");
    assert_eq!(wait_texts(&server, 7, 1).await, ["echo text after"]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn with_no_session_starts_left_the_provider_waits_for_the_limit_to_reset() {
    // Longer than the provider's own wait before it identifies again (5 s at most), so that
    // only a wait for the limit identifies after it.
    let reset = Duration::from_secs(6);
    // The limit resets `reset` after the stand-in started, so no sooner than this plus reset,
    // however slowly the first session came up.
    let before = Instant::now();
    let server = DiscordServer::builder().session_start_limit(1, reset).start().await.unwrap();
    let (bot, _) = echo_bot(&server).await;
    server.invalidate_sessions(false);
    until("a new session identifies once the limit reset", || server.identifies().len() == 2).await;
    let waited = server.identifies()[1] - before;
    // The stand-in says how long in whole milliseconds, rounded down.
    assert!(waited >= reset - Duration::from_millis(5), "identified again after {waited:?}");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_fails_the_start_as_unauthorized() {
    let server = DiscordServer::start().await.unwrap();
    let provider = botmesh_discord::DiscordProvider::new(
        "wrong",
        botmesh_discord::DiscordProvider::default_intents(),
    )
    .with_proxy(server.url());
    let started = botmesh_core::traits::Provider::start(
        &provider,
        botmesh_core::traits::Intake::closed("discord"),
    )
    .await;
    assert!(
        matches!(started, Err(botmesh_core::Error::Unauthorized { .. })),
        "{:?}",
        started.err()
    );
    assert_eq!(server.identifies().len(), 0, "never identified");
}
