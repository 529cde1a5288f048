//! The mapping both ways: commands, topics, media, edits, reactions, buttons.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::{Bot, BotError, Content, OutboundContent};
use botmesh_testing::telegram::TelegramServer;
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn polling_answers_users_commands_lose_the_bot_s_username_and_topics_are_kept() {
    let server = TelegramServer::builder().bot_username("shop_bot").start().await.unwrap();
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(42, 42, "/start@shop_bot now");
    assert_eq!(wait_texts(&server, 42, 1).await, ["echo text /start now"]);
    server.user_says_in_thread(-100_777, 9, 5, "in a topic");
    wait_texts(&server, -100_777, 1).await;
    let sent = server.sent(-100_777);
    assert_eq!(
        (sent[0].thread_id, sent[0].text.as_deref()),
        (Some(9), Some("echo text in a topic"))
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_photo_s_bytes_are_fetched_through_the_provider_and_edits_and_reactions_arrive_typed() {
    let server = TelegramServer::start().await.unwrap();
    let bot = Bot::builder()
        .provider(polling(&server))
        .on_message(|ctx| async move {
            let answer = match &ctx.message().inbound.content {
                Content::Media { caption, .. } => {
                    let bytes = ctx.media().await?;
                    format!("{} bytes, {}", bytes.len(), caption.as_deref().unwrap_or_default())
                }
                Content::Edit { of, content } => {
                    format!("{of} now says {}", content.as_text().unwrap_or_default())
                }
                Content::Reaction { to, emoji } => format!("{to} got {emoji:?}"),
                other => format!("a {}", other.type_name()),
            };
            ctx.reply(answer).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.user_sends_photo(8, 8, vec![7u8; 1234], Some("my cat"));
    assert_eq!(wait_texts(&server, 8, 1).await, ["1234 bytes, my cat"]);
    let said = server.next_message_id(8);
    server.user_sends(serde_json::json!({"message": {
        "message_id": said, "date": 0, "text": "helo",
        "chat": {"id": 8, "type": "private", "first_name": "u"},
        "from": {"id": 8, "is_bot": false, "first_name": "u"},
    }}));
    wait_texts(&server, 8, 2).await;
    server.user_edits(8, 8, said, "hello");
    let texts = wait_texts(&server, 8, 3).await;
    assert_eq!(texts[2], format!("8:{said} now says hello"));
    server.user_sends(serde_json::json!({"message_reaction": {
        "chat": {"id": 8, "type": "private", "first_name": "u"},
        "message_id": said, "date": 0,
        "user": {"id": 8, "is_bot": false, "first_name": "u"},
        "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}],
    }}));
    let texts = wait_texts(&server, 8, 4).await;
    assert_eq!(texts[3], format!("8:{said} got Some(\"👍\")"));
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn media_goes_out_uploaded_or_by_url_and_group_members_each_have_a_conversation() {
    use botmesh_core::{MediaKind, MediaSource, Outbound};
    use botmesh_testing::telegram::MediaSource as Sent;
    let server = TelegramServer::start().await.unwrap();
    let bot = Bot::builder()
        .provider(polling(&server))
        .on_message(|ctx| async move {
            let (chat, body) = (ctx.chat().clone(), ctx.body().to_owned());
            let source = match body.as_str() {
                "upload" => MediaSource::bytes(vec![1u8, 2, 3], Some("a.png".into()), None),
                _ => MediaSource::url("https://cdn.example/cat.png"),
            };
            let kind = MediaKind::Image;
            let content = OutboundContent::Media { kind, source, caption: Some(body) };
            ctx.send_message(&Outbound::new(chat, content)).await?;
            // In a group, the key is the member's own.
            ctx.reply(ctx.key().to_string()).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.user_says(-500, 1, "upload");
    server.wait_for_sent(-500, 2, WITHIN).await;
    server.user_says(-500, 2, "link");
    let sent = server.wait_for_sent(-500, 4, WITHIN).await;
    let media: Vec<Sent> = sent.iter().filter_map(|m| m.media.clone()).map(|m| m.source).collect();
    assert_eq!(
        media,
        [
            Sent::Upload { file_name: Some("a.png".into()), bytes: vec![1, 2, 3] },
            Sent::Url("https://cdn.example/cat.png".into())
        ]
    );
    let keys: Vec<String> =
        sent.iter().filter(|m| m.media.is_none()).filter_map(|m| m.text.clone()).collect();
    assert_eq!(keys, ["telegram:-500/1", "telegram:-500/2"], "one conversation per member");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_button_press_reaches_the_bot_titled_and_its_callback_query_is_answered() {
    let server = TelegramServer::start().await.unwrap();
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(7, 7, "menu");
    let deadline = Instant::now() + WITHIN;
    while server.sent(7).is_empty() {
        assert!(Instant::now() < deadline, "no menu");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let menu = server.sent(7)[0].clone();
    assert!(menu.reply_markup.is_some(), "buttons go out as an inline keyboard");
    let query = server.press_button(7, 7, "yes", menu.message_id);
    let texts = wait_texts(&server, 7, 2).await;
    assert_eq!(texts[1], "echo button Yes please");
    let deadline = Instant::now() + WITHIN;
    while server.callback_answers().is_empty() {
        assert!(Instant::now() < deadline, "the callback query was never answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answered: Vec<String> =
        server.callback_answers().into_iter().map(|a| a.callback_query_id).collect();
    assert_eq!(answered, [query], "the press's own query, once");
    bot.stop().await.unwrap();
}
