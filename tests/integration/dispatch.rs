//! Ordering, parallelism, dedupe and hooks of the single-process dispatcher.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::{BotError, Content, Event, Inbound, Media};
use tokio::time::Instant;

use crate::support::{PlainStore, builder};

#[tokio::test(start_paused = true)]
async fn a_slow_handler_on_chat_a_overlaps_chat_b_but_never_a_s_next_message() {
    let spans: Arc<Mutex<Vec<(String, Instant, Instant)>>> = Arc::default();
    let log = Arc::clone(&spans);
    let (b, provider, _) = builder();
    let bot = b
        .on_message(move |ctx| {
            let log = Arc::clone(&log);
            async move {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(100)).await;
                log.lock().unwrap().push((ctx.body().to_owned(), start, Instant::now()));
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("a", "a1");
    provider.say("a", "a2");
    provider.say("b", "b1");
    provider.settled(&bot).await;
    let spans = spans.lock().unwrap().clone();
    let get = |name: &str| spans.iter().find(|s| s.0 == name).cloned().unwrap();
    let (a1, a2, b1) = (get("a1"), get("a2"), get("b1"));
    assert!(a1.2 <= a2.1, "a2 starts only after a1 ended: {a1:?} {a2:?}");
    assert!(b1.1 < a1.2 && a1.1 < b1.2, "b1 runs while a1 runs: {a1:?} {b1:?}");
}

#[tokio::test(start_paused = true)]
async fn one_chat_is_handled_in_arrival_order() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    let (b, provider, _) = builder();
    let bot = b
        .on_message(move |ctx| {
            let log = Arc::clone(&log);
            async move {
                // Later messages sleep less, so any overlap would reorder them.
                let n: u64 = ctx.body().parse().unwrap();
                tokio::time::sleep(Duration::from_millis(50 - n)).await;
                log.lock().unwrap().push(ctx.body().to_owned());
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for i in 0..30 {
        provider.say("c", &i.to_string());
    }
    provider.settled(&bot).await;
    let expected: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    assert_eq!(*seen.lock().unwrap(), expected);
}

#[tokio::test]
async fn a_repeated_message_id_is_handled_once_and_reported_as_a_duplicate() {
    let (b, provider, rec) = builder();
    let bot = b
        .on_message(|ctx| async move {
            ctx.reply("ok").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let m = Inbound::text("test", "same-id", "c", "hi");
    assert_eq!(bot.dispatch(m.clone()).unwrap(), botmesh_core::Accepted::Queued);
    assert_eq!(bot.dispatch(m).unwrap(), botmesh_core::Accepted::Duplicate);
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["ok"]);
    assert!(rec.events().iter().any(|e| matches!(e, Event::Duplicate { .. })));
}

#[tokio::test]
async fn hooks_rewrite_what_the_rest_of_the_bot_sees() {
    let (b, provider, _) = builder();
    let bot = b
        .before_message(|mut m| async move {
            if let Content::Voice { media, .. } = m.content().clone() {
                m.set_body(format!("transcript of {}", media.url)).set_kind("text").set_lang("es");
            }
            Ok::<_, BotError>(m)
        })
        .on_message(|ctx| async move {
            let m = ctx.message();
            ctx.reply(format!("{}|{}|{}", m.body, m.kind, m.lang.clone().unwrap_or_default()))
                .await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let voice = Content::Voice { media: Media::new("v1.ogg"), seconds: Some(3) };
    provider.inject(Inbound::new("test", "1", "c", voice));
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["transcript of v1.ogg|text|es"]);
}

#[tokio::test]
async fn a_failing_hook_stops_the_message_and_is_reported() {
    let (b, provider, rec) = builder();
    let bot = b
        .before_message(|m| async move {
            if m.body == "bad" {
                return Err("transcription service down".into());
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(m)
        })
        .on_message(|ctx| async move {
            ctx.reply(ctx.body().to_owned()).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "bad");
    provider.say("c", "good");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["good"]);
    let errors = rec.errors();
    assert_eq!(errors.len(), 1);
    assert!(
        matches!(&*errors[0], BotError::Handler { source, .. } if source.to_string() == "transcription service down")
    );
}

#[tokio::test]
async fn group_members_have_their_own_conversation_key() {
    let (b, provider, _) = builder();
    let bot = b
        .flow(
            botmesh_core::Flow::new("name")
                .trigger(botmesh_core::Trigger::keyword("start"))
                .ask(botmesh_core::Ask::new("name", "Name?"))
                .do_step("done", |c| async move {
                    let name: String = c.get("name").unwrap();
                    c.send(format!("hi {name}")).await?;
                    Ok::<_, BotError>(botmesh_core::Step::End)
                }),
        )
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say_in_group("g", "ana", "start");
    provider.say_in_group("g", "bob", "start");
    provider.say_in_group("g", "bob", "Bob");
    provider.say_in_group("g", "ana", "Ana");
    provider.settled(&bot).await;
    // Each member's conversation is its own: the two run side by side in one group chat.
    let mut texts = provider.texts_to("g");
    texts.sort();
    assert_eq!(texts, ["Name?", "Name?", "hi Ana", "hi Bob"]);
}

#[tokio::test]
async fn bot_send_reaches_any_chat_and_stop_is_graceful() {
    let (b, provider, rec) = builder();
    let bot = b.build().unwrap();
    bot.start().await.unwrap();
    bot.send(&botmesh_core::Outbound::text("someone", "news")).await.unwrap();
    assert_eq!(provider.texts_to("someone"), ["news"]);
    bot.stop().await.unwrap();
    assert!(matches!(
        bot.dispatch(Inbound::text("test", "x", "c", "late")),
        Err(BotError::NotRunning)
    ));
    assert!(matches!(rec.events().last(), Some(Event::Stopped)));
}

/// A chat's worker stays a while after its queue empties (five seconds): a chat that writes
/// again within that time is served by the same worker, which wrote the chat's record once,
/// while one quiet for longer gets a new worker (the record is written again), so quiet chats
/// do not keep workers for ever.
#[tokio::test(start_paused = true)]
async fn a_chat_that_writes_again_soon_keeps_its_worker_and_a_quiet_one_lets_it_go() {
    let store = Arc::new(PlainStore::local());
    let (b, provider, _) = builder();
    let bot = b
        .store(store.clone())
        .on_message(|ctx| async move {
            ctx.reply("ok").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("a", "1");
    provider.settled(&bot).await;
    assert_eq!(store.chat_writes(), 1);
    for n in 2..=5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        provider.say("a", &n.to_string());
        provider.settled(&bot).await;
    }
    assert_eq!(store.chat_writes(), 1, "the same worker served the chat's next four messages");
    tokio::time::sleep(Duration::from_secs(6)).await;
    provider.say("a", "6");
    provider.settled(&bot).await;
    assert_eq!(store.chat_writes(), 2, "after six quiet seconds the chat had a new worker");
    assert_eq!(provider.sent_count(), 6);
    bot.stop().await.unwrap();
}
