//! `getMe`, `getUpdates` long polls and offsets, and the one-poller rule.

use std::time::{Duration, Instant};

use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::Requester;
use teloxide::types::{UpdateId, UpdateKind};
use teloxide::{ApiError, RequestError};

use super::super::Fault;
use super::{SOON, start};

#[tokio::test]
async fn get_me_answers_the_bot() {
    let (server, bot) = start().await;
    let me = bot.get_me().await.unwrap();
    assert_eq!(me.id.0, 123);
    assert!(me.is_bot);
    assert_eq!(me.username(), "botmesh_test_bot");
    assert_eq!(server.calls(), ["getMe"]);
}

#[tokio::test]
async fn a_long_poll_returns_an_update_injected_while_it_waits() {
    let (server, bot) = start().await;
    let poll = tokio::spawn({
        let bot = bot.clone();
        async move {
            let started = Instant::now();
            let updates = bot.get_updates().timeout(10).await.unwrap();
            (updates, started.elapsed())
        }
    });
    assert!(server.wait_for_pollers(1, SOON).await, "the poll never arrived");
    // The poll is waiting: nothing was queued when it came.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!poll.is_finished());
    let id = server.user_says(42, 42, "hello");
    let (updates, waited) = poll.await.unwrap();
    assert!(waited < Duration::from_secs(5), "woken late: {waited:?}");
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].id, UpdateId(u32::try_from(id).unwrap()));
    let UpdateKind::Message(m) = &updates[0].kind else { panic!("{:?}", updates[0].kind) };
    assert_eq!(m.text(), Some("hello"));
    assert_eq!(server.pollers_now(), 0);
}

#[tokio::test]
async fn a_long_poll_with_nothing_to_return_times_out_empty() {
    let (_server, bot) = start().await;
    let started = Instant::now();
    let updates = bot.get_updates().timeout(1).await.unwrap();
    assert!(updates.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
}

#[tokio::test]
async fn an_offset_confirms_every_update_below_it() {
    let (server, bot) = start().await;
    let ids: Vec<i64> = ["a", "b", "c"].iter().map(|t| server.user_says(7, 7, t)).collect();
    let all = bot.get_updates().await.unwrap();
    assert_eq!(all.len(), 3);
    // Without an offset nothing is confirmed: the same updates come again.
    assert_eq!(bot.get_updates().await.unwrap().len(), 3);
    let rest = bot.get_updates().offset(i32::try_from(ids[1]).unwrap()).await.unwrap();
    assert_eq!(rest.iter().map(|u| i64::from(u.id.0)).collect::<Vec<_>>(), &ids[1..]);
    let pending: Vec<i64> =
        server.pending_updates().iter().map(|u| u["update_id"].as_i64().unwrap()).collect();
    assert_eq!(pending, &ids[1..]);
    let none = bot.get_updates().offset(i32::try_from(ids[2] + 1).unwrap()).await.unwrap();
    assert!(none.is_empty());
    assert!(server.pending_updates().is_empty());
    // `limit` caps a batch.
    server.user_says(7, 7, "d");
    server.user_says(7, 7, "e");
    assert_eq!(bot.get_updates().limit(1).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_second_poller_is_refused_with_a_conflict() {
    let (server, bot) = start().await;
    let first = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(10).await }
    });
    assert!(server.wait_for_pollers(1, SOON).await);
    let second = bot.get_updates().timeout(10).await;
    assert!(
        matches!(second, Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates))),
        "{second:?}"
    );
    assert_eq!(server.conflicts(), 1);
    assert_eq!(server.max_pollers(), 2);
    assert_eq!(server.pollers_now(), 1);
    server.user_says(1, 1, "wake up");
    assert_eq!(first.await.unwrap().unwrap().len(), 1);
    assert_eq!(server.pollers_now(), 0);
    // One poller after another is no conflict.
    bot.get_updates().await.unwrap();
    assert_eq!(server.conflicts(), 1);
}

#[tokio::test]
async fn too_many_requests_surfaces_as_retry_after() {
    let (server, bot) = start().await;
    server.fail_next("getUpdates", Fault::TooManyRequests { retry_after: Duration::from_secs(3) });
    let refused = bot.get_updates().await;
    let Err(RequestError::RetryAfter(after)) = refused else { panic!("{refused:?}") };
    assert_eq!(after.seconds(), 3);
    // Only the next call failed.
    bot.get_updates().await.unwrap();
    assert_eq!(server.calls(), ["getUpdates", "getUpdates"]);
}

#[tokio::test]
async fn a_revoked_token_is_an_invalid_token() {
    let (server, bot) = start().await;
    server.revoke_token();
    let refused = bot.get_me().await;
    assert!(matches!(refused, Err(RequestError::Api(ApiError::InvalidToken))), "{refused:?}");
    let refused = bot.get_updates().await;
    assert!(matches!(refused, Err(RequestError::Api(ApiError::InvalidToken))), "{refused:?}");
    server.restore_token();
    bot.get_me().await.unwrap();
    // An injected 401 looks the same, once.
    server.fail_next("GETME", Fault::Unauthorized);
    let refused = bot.get_me().await;
    assert!(matches!(refused, Err(RequestError::Api(ApiError::InvalidToken))), "{refused:?}");
    bot.get_me().await.unwrap();
}

#[tokio::test]
async fn any_api_error_can_be_injected() {
    let (server, bot) = start().await;
    server.fail_next(
        "sendMessage",
        Fault::Api {
            status: 403,
            description: "Forbidden: bot was blocked by the user".to_owned(),
        },
    );
    let refused = bot.send_message(teloxide::types::ChatId(5), "hi").await;
    assert!(matches!(refused, Err(RequestError::Api(ApiError::BotBlocked))), "{refused:?}");
    assert!(server.sent(5).is_empty());
}

#[tokio::test]
async fn a_poller_that_hangs_up_stops_counting() {
    let (server, bot) = start().await;
    let poll = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(30).await }
    });
    assert!(server.wait_for_pollers(1, SOON).await);
    poll.abort();
    let gone = async {
        while server.pollers_now() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(SOON, gone).await.expect("the abandoned poll still counts");
    // So the next poller is not refused.
    bot.get_updates().await.unwrap();
    assert_eq!(server.conflicts(), 0);
}
