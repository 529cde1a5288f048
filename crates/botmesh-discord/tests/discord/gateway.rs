//! The gateway session's life on one replica: invalid sessions, reconnect requests, the
//! session start limit.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::{Bot, Event, TransportStatus};
use botmesh_testing::discord::{Author, DiscordServer};

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
    let server = DiscordServer::start().await.unwrap();
    let (bot, events) = echo_bot(&server).await;
    server.invalidate_sessions(false);
    until("a new session identifies", || server.identifies().len() == 2).await;
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
    let reset = Duration::from_secs(2);
    let server = DiscordServer::builder().session_start_limit(1, reset).start().await.unwrap();
    let (bot, _) = echo_bot(&server).await;
    let first = server.identifies()[0];
    server.invalidate_sessions(false);
    until("a new session identifies once the limit reset", || server.identifies().len() == 2).await;
    let waited = server.identifies()[1] - first;
    assert!(waited >= reset - Duration::from_millis(50), "identified again after {waited:?}");
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
    let started =
        botmesh_core::Provider::start(&provider, botmesh_core::Intake::closed("discord")).await;
    assert!(
        matches!(started, Err(botmesh_core::Error::Unauthorized { .. })),
        "{:?}",
        started.err()
    );
    assert_eq!(server.identifies().len(), 0, "never identified");
}
