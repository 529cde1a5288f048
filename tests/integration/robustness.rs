//! Bad input and failing code: reported, never a panic, nothing else lost.

use botmesh_core::{Ask, BotError, EndReason, ErrorKind, Event, Flow, Inbound, Step, Trigger};

use crate::support::builder;

#[tokio::test]
async fn a_handler_that_panics_is_reported_and_the_chat_goes_on() {
    let (b, provider, rec) = builder();
    let bot = b
        .on_message(|ctx| async move {
            if ctx.body() == "boom" {
                panic!("handler exploded");
            }
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "boom");
    provider.say("c", "after");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["echo after"]);
    let errors = rec.errors();
    assert_eq!(errors.len(), 1);
    assert!(
        matches!(&*errors[0], BotError::Panic { message, .. } if message == "handler exploded")
    );
}

#[tokio::test]
async fn a_step_that_panics_ends_its_flow_and_the_chat_goes_on() {
    let (b, provider, rec) = builder();
    let bot = b
        .flow(Flow::new("f").trigger(Trigger::keyword("go")).persistent().do_step(
            "s",
            |c| async move {
                let m = c.ask("Number?").await?;
                let n: u32 = m.body.parse().expect("a number");
                c.send(format!("{n}")).await?;
                Ok::<_, BotError>(Step::End)
            },
        ))
        .on_message(|ctx| async move {
            ctx.reply("menu").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for t in ["go", "abc", "hello"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Number?", "menu"]);
    assert!(matches!(&*rec.errors()[0], BotError::Panic { .. }));
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Failed, .. }))
    );
    assert_eq!(
        bot.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "a failed flow does not leave a checkpoint to fail again"
    );
}

#[tokio::test]
async fn an_empty_body_is_handled_like_any_other_and_re_asked_by_a_question() {
    let (b, provider, rec) = builder();
    let bot = b
        .flow(Flow::new("f").trigger(Trigger::keyword("go")).ask(Ask::new("name", "Name?")))
        .on_message(|ctx| async move {
            ctx.reply(format!("[{}]", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("a", "");
    provider.say("b", "go");
    provider.say("b", "");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("a"), ["[]"]);
    assert_eq!(
        provider.texts_to("b"),
        ["Name?", "Sorry, I didn't understand that. Please try again."]
    );
    assert!(rec.errors().is_empty());
}

#[tokio::test]
async fn a_very_large_body_is_refused_with_a_typed_error_and_the_chat_goes_on() {
    let (b, provider, rec) = builder();
    let bot = b
        .max_body_bytes(64 * 1024)
        .on_message(|ctx| async move {
            ctx.reply(format!("{} bytes", ctx.body().len())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let big = "x".repeat(64 * 1024);
    let huge = "y".repeat(10 * 1024 * 1024);
    assert_eq!(
        bot.dispatch(Inbound::text("test", "1", "c", big)).unwrap(),
        botmesh_core::Accepted::Queued
    );
    let refused = bot.dispatch(Inbound::text("test", "2", "c", huge)).unwrap_err();
    assert_eq!(refused.as_contract().map(|e| e.kind()), Some(ErrorKind::TooLarge));
    assert_eq!(
        bot.dispatch(Inbound::text("test", "3", "c", "small")).unwrap(),
        botmesh_core::Accepted::Queued
    );
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["65536 bytes", "5 bytes"]);
    let errors = rec.errors();
    assert_eq!(errors.len(), 1, "the refusal is also an error event");
    assert!(errors[0].to_string().contains("too large"));
}

#[tokio::test]
async fn a_send_on_a_closed_transport_is_a_typed_error() {
    let (b, provider, rec) = builder();
    let bot = b
        .on_message(|ctx| async move {
            ctx.reply("hi").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.close();
    provider.say("c", "hello");
    provider.settled(&bot).await;
    let errors = rec.errors();
    assert_eq!(errors.len(), 1);
    let BotError::Handler { source, .. } = &*errors[0] else { panic!("{:?}", errors[0]) };
    let inner = source.downcast_ref::<BotError>().and_then(BotError::as_contract).map(|e| e.kind());
    assert_eq!(inner, Some(ErrorKind::TransportClosed));
}

#[tokio::test]
async fn a_panicking_event_listener_does_not_stop_the_chat() {
    let (b, provider, _) = builder();
    let bot = b
        .on(|e| {
            if matches!(e, Event::Handled { .. }) {
                panic!("listener bug");
            }
        })
        .on_message(|ctx| async move {
            ctx.reply("ok").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for _ in 0..3 {
        provider.say("c", "hi");
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["ok", "ok", "ok"]);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_too_large_to_represent_means_no_timeout() {
    let (b, provider, rec) = builder();
    let flow = Flow::new("f")
        .trigger(Trigger::keyword("go"))
        .timeout(std::time::Duration::MAX)
        .ask(Ask::new("x", "X?"))
        .do_step("done", |c| async move {
            c.send(format!("got {}", c.get::<String>("x").unwrap())).await?;
            Ok::<_, BotError>(Step::End)
        });
    let bot = b.flow(flow).build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.settled(&bot).await;
    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    provider.say("c", "42");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["X?", "got 42"]);
    assert!(rec.errors().is_empty());
}

#[tokio::test]
async fn a_flow_whose_transport_goes_away_mid_step_keeps_its_checkpoint() {
    let (b, provider, rec) = builder();
    let flow = Flow::new("f")
        .trigger(Trigger::keyword("go"))
        .persistent()
        .ask(Ask::new("x", "X?"))
        .ask(Ask::new("y", "Y?"));
    let bot = b.flow(flow).build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.settled(&bot).await;
    provider.close();
    provider.say("c", "1");
    provider.settled(&bot).await;
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Suspended, .. }))
    );
    let kept = bot.store().get_checkpoint("test:c").await.unwrap();
    assert!(kept.is_some(), "the user's progress is kept for when the transport is back");
}
