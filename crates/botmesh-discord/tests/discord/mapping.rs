//! Both ways through serenity: messages in and replies out, buttons pressed and answered,
//! files, reactions, slash commands, the bot's own messages.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use botmesh_core::traits::Provider;
use botmesh_core::{Bot, BotError, Content, MediaKind, Outbound, OutboundContent, TransportStatus};
use botmesh_testing::discord::{Author, DiscordServer};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// A bot on the stand-in, started, with its session live.
async fn started(server: &DiscordServer, builder: botmesh_core::BotBuilder) -> Bot {
    let bot = builder.build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    until("the session is live", || server.live_sessions() == 1).await;
    bot
}

#[tokio::test]
async fn guild_messages_and_dms_come_in_and_replies_go_out_to_their_channel() {
    let server = DiscordServer::start().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let provider = discord(&server);
    let builder = echo(Bot::builder().provider(provider.clone()), &Arc::default()).on(move |e| {
        if let botmesh_core::Event::Transport { status, .. } = e {
            kept.lock().unwrap().push(*status);
        }
    });
    let bot = started(&server, builder).await;
    let ana = Author::in_guild(11, "ana", 500);
    let bob = Author::in_guild(12, "bob", 500);
    let first = server.user_says(7, &ana, "hi");
    server.user_says(7, &bob, "hello");
    server.user_says(8, &Author::dm(11, "ana"), "psst");
    let sent = server.wait_for_sent(7, 2, WITHIN).await;
    let mut texts: Vec<&str> = sent.iter().map(|m| m.content.as_str()).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["echo text hello", "echo text hi"]);
    let quoted = Outbound::text("7", "quoted").reply_to(first.to_string().into());
    provider.send(&quoted).await.unwrap();
    let quoted = server.sent().into_iter().find(|m| m.content == "quoted").unwrap();
    assert_eq!(quoted.reply_to, Some(first), "a reply references the message it answers");
    assert_eq!(wait_texts(&server, 8, 1).await, ["echo text psst"]);
    bot.stop().await.unwrap();
    // The server notices the closed socket a moment after the stop returns.
    until("stop closed the session", || server.live_sessions() == 0).await;
    let statuses = seen.lock().unwrap().clone();
    assert_eq!(statuses, [TransportStatus::Open, TransportStatus::Closed]);
}

#[tokio::test]
async fn each_member_of_a_guild_channel_has_a_conversation_of_their_own() {
    let server = DiscordServer::start().await.unwrap();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&keys);
    let builder = Bot::builder().provider(discord(&server)).on_message(move |ctx| {
        let kept = Arc::clone(&kept);
        async move {
            let inbound = &ctx.message().inbound;
            let replying = inbound.reply_to.as_ref().map(ToString::to_string);
            kept.lock().unwrap().push((
                inbound.key().to_string(),
                inbound.sender_name.clone(),
                replying,
            ));
            ctx.reply("ok").await?;
            Ok::<_, BotError>(())
        }
    });
    let bot = started(&server, builder).await;
    server.user_says(7, &Author::in_guild(11, "ana", 500), "a");
    server.user_replies(7, &Author::in_guild(12, "bob", 500), 4242, "b");
    server.user_says(9, &Author::dm(11, "ana"), "c");
    wait_texts(&server, 7, 2).await;
    wait_texts(&server, 9, 1).await;
    let mut keys = keys.lock().unwrap().clone();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("discord:7/11".to_owned(), Some("ana".to_owned()), None),
            ("discord:7/12".to_owned(), Some("bob".to_owned()), Some("4242".to_owned())),
            ("discord:9".to_owned(), Some("ana".to_owned()), None),
        ]
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_button_press_is_acknowledged_within_three_seconds_and_reaches_the_bot() {
    let server = DiscordServer::start().await.unwrap();
    let pressed = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&pressed);
    let builder = Bot::builder().provider(discord(&server)).on_message(move |ctx| {
        let kept = Arc::clone(&kept);
        async move {
            match &ctx.message().inbound.content {
                Content::Button { id, title } => {
                    kept.lock().unwrap().push((id.clone(), title.clone()));
                    ctx.reply(format!("you chose {title}")).await?;
                }
                _ => {
                    let buttons = vec![
                        botmesh_core::Button::new("yes", "Yes please"),
                        botmesh_core::Button::new("no", "No"),
                    ];
                    let content = OutboundContent::Buttons { body: "Sure?".into(), buttons };
                    ctx.send_message(&Outbound::new(ctx.chat().clone(), content)).await?;
                }
            }
            Ok::<_, BotError>(())
        }
    });
    let bot = started(&server, builder).await;
    let ana = Author::in_guild(11, "ana", 500);
    server.user_says(7, &ana, "menu");
    let menu = server.wait_for_sent(7, 1, WITHIN).await.remove(0);
    assert_eq!(menu.content, "Sure?");
    let ids: Vec<&str> = menu.buttons.iter().map(|b| b.custom_id.as_str()).collect();
    assert_eq!(ids, ["yes", "no"]);
    let interaction = server.press_button(&ana, menu.id, "yes");
    until("the press is acknowledged", || !server.callbacks().is_empty()).await;
    let callback = server.callbacks().remove(0);
    assert_eq!((callback.interaction, callback.kind), (interaction, 6), "a deferred update");
    // Discord drops an interaction not answered within 3 s.
    assert!(callback.after < Duration::from_secs(3), "answered after {:?}", callback.after);
    let answer = server.wait_for_sent(7, 2, WITHIN).await.remove(1);
    assert_eq!(answer.content, "you chose Yes please");
    assert_eq!(*pressed.lock().unwrap(), [("yes".to_owned(), "Yes please".to_owned())]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn files_reactions_and_slash_commands_map_and_the_bot_s_own_messages_do_not() {
    let server = DiscordServer::start().await.unwrap();
    let provider = discord(&server);
    let fetched = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&fetched);
    let builder =
        echo(Bot::builder().provider(provider.clone()), &Arc::default()).on_message(move |ctx| {
            let kept = Arc::clone(&kept);
            async move {
                if ctx.message().inbound.content.media().is_some() {
                    let bytes = ctx.media().await?.to_vec();
                    kept.lock().unwrap().push(bytes);
                }
                Ok::<_, BotError>(())
            }
        });
    let bot = started(&server, builder).await;
    let ana = Author::dm(11, "ana");
    server.user_sends_file(8, &ana, "cat.png", "image/png", b"\x89PNG", "my cat");
    assert_eq!(wait_texts(&server, 8, 1).await, ["echo media my cat"]);
    until("the file was fetched", || !fetched.lock().unwrap().is_empty()).await;
    assert_eq!(fetched.lock().unwrap()[0], b"\x89PNG");
    let said = server.user_says(8, &ana, "react to this");
    wait_texts(&server, 8, 2).await;
    server.react(8, &ana, said, "👍", true);
    assert_eq!(wait_texts(&server, 8, 3).await[2], "echo reaction 👍");
    let command = server.slash_command(8, &ana, "order", &[("item", "tea"), ("size", "large")]);
    assert_eq!(wait_texts(&server, 8, 4).await[3], "echo text /order tea large");
    let callback = server.callbacks().into_iter().find(|c| c.interaction == command).unwrap();
    assert_eq!((callback.kind, callback.data["flags"].as_u64()), (4, Some(64)), "ephemeral");
    // The bot's own message, echoed back by the gateway, is not handed to it.
    server.user_says(8, &Author::dm(server.bot_id(), "botmesh-test"), "from myself");
    server.user_says(8, &ana, "last");
    assert_eq!(wait_texts(&server, 8, 5).await[4], "echo text last");
    // Outbound media, reactions and replies.
    let out = Outbound::new(
        "8",
        OutboundContent::Media {
            kind: MediaKind::Image,
            source: botmesh_core::MediaSource::url("https://example.com/a.png"),
            caption: Some("look".into()),
        },
    );
    let receipt = provider.send(&out).await.unwrap();
    assert!(receipt.id.is_some());
    let upload = Outbound::new(
        "8",
        OutboundContent::Media {
            kind: MediaKind::Document,
            source: botmesh_core::MediaSource::bytes(b"hello".to_vec(), Some("a.txt".into()), None),
            caption: None,
        },
    );
    provider.send(&upload).await.unwrap();
    let reaction = Outbound::new(
        "8",
        OutboundContent::Reaction { to: said.to_string().into(), emoji: Some("🎉".into()) },
    );
    provider.send(&reaction).await.unwrap();
    let sent = server.sent();
    let image = sent.iter().find(|m| m.content == "look").unwrap();
    assert_eq!(image.embed_images, ["https://example.com/a.png"]);
    let file = sent.iter().find(|m| !m.files.is_empty()).unwrap();
    assert_eq!(
        (file.files[0].file_name.as_str(), file.files[0].data.as_slice()),
        ("a.txt", &b"hello"[..])
    );
    let reacted = server.reactions();
    assert_eq!(
        (reacted[0].message, reacted[0].emoji.as_str(), reacted[0].added),
        (said, "🎉", true)
    );
    bot.stop().await.unwrap();
}
