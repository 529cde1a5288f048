//! Free-form async conversations.

use botmesh_core::{BotError, Conversation, EndReason, Event, Trigger};

use crate::support::builder;

#[tokio::test]
async fn a_conversation_waits_for_the_user_s_next_messages() {
    let (b, provider, rec) = builder();
    let bot = b
        .conversation(
            Conversation::new("support", |c| async move {
                let problem = c.ask("What went wrong?").await?;
                let mut lines = vec![problem.body];
                loop {
                    let m = c.ask("Anything else? (done to finish)").await?;
                    if m.body == "done" {
                        break;
                    }
                    lines.push(m.body);
                }
                c.send(format!("Ticket: {}", lines.join("; "))).await?;
                Ok::<_, BotError>(())
            })
            .trigger(Trigger::keyword("help")),
        )
        .on_message(|ctx| async move {
            ctx.reply("menu").await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for t in ["help", "no wifi", "router blinks", "done", "hi"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(
        provider.texts_to("c"),
        [
            "What went wrong?",
            "Anything else? (done to finish)",
            "Anything else? (done to finish)",
            "Ticket: no wifi; router blinks",
            "menu"
        ]
    );
    assert!(rec.events().iter().any(|e| matches!(e, Event::ConversationEnded { name, reason: EndReason::Completed, .. } if name == "support")));
}

#[tokio::test]
async fn a_handler_can_start_a_conversation_by_name() {
    let (b, provider, _) = builder();
    let bot = b
        .conversation(Conversation::new("survey", |c| async move {
            let score = c.ask("Score 1-5?").await?;
            c.send(format!("Thanks for the {}", score.body)).await?;
            Ok::<_, BotError>(())
        }))
        .on_message(|ctx| async move {
            if ctx.body() == "survey" {
                ctx.start("survey");
            }
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for t in ["survey", "5"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Score 1-5?", "Thanks for the 5"]);
}

#[tokio::test]
async fn a_conversation_error_is_reported_with_the_user_s_own_error() {
    #[derive(Debug)]
    struct PaymentDeclined;
    impl std::fmt::Display for PaymentDeclined {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("payment declined")
        }
    }
    impl std::error::Error for PaymentDeclined {}
    let (b, provider, rec) = builder();
    let bot = b
        .conversation(
            Conversation::new("pay", |c| async move {
                c.ask("Card?").await?;
                Err::<(), botmesh_core::traits::BoxError>(Box::new(PaymentDeclined))
            })
            .trigger(Trigger::keyword("pay")),
        )
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "pay");
    provider.say("c", "4242");
    provider.settled(&bot).await;
    let errors = rec.errors();
    let BotError::Handler { source, .. } = &*errors[0] else { panic!("{:?}", errors[0]) };
    assert!(
        source.downcast_ref::<PaymentDeclined>().is_some(),
        "the user's error type flows through"
    );
}
