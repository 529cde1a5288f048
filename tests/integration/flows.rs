//! Flows: questions, validation, `do` steps, `goto`, timeouts, the idle watchdog, state.

use std::time::Duration;

use botmesh_core::{Ask, BotError, EndReason, Event, Flow, Inbound, Step, Trigger};
use serde_json::json;

use crate::support::builder;

fn order_flow() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?").validate(|m| {
            m.body
                .trim()
                .parse::<u32>()
                .map(|n| json!(n))
                .map_err(|_| "A number, please.".to_owned())
        }))
        .do_step("confirm", |c| async move {
            let size: String = c.get("size").unwrap();
            let qty: u32 = c.get("qty").unwrap();
            c.send(format!("{qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

#[tokio::test]
async fn questions_validate_and_reask_until_the_answer_is_valid() {
    let (b, provider, rec) = builder();
    let bot = b.flow(order_flow()).build().unwrap();
    bot.start().await.unwrap();
    for text in ["order", "XL", "m", "two", "2"] {
        provider.say("c", text);
    }
    provider.settled(&bot).await;
    assert_eq!(
        provider.texts_to("c"),
        ["Size?", "Please answer with one of: S, M, L", "How many?", "A number, please.", "2 x M"]
    );
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Completed, .. }))
    );
}

#[tokio::test]
async fn built_in_texts_follow_the_message_language() {
    let (b, provider, _) = builder();
    let bot = b.flow(order_flow()).build().unwrap();
    bot.start().await.unwrap();
    provider.inject(Inbound::text("test", "1", "c", "order").with_lang("es"));
    provider.inject(Inbound::text("test", "2", "c", "XL").with_lang("es"));
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Size?", "Responde con una de estas opciones: S, M, L"]);
}

#[tokio::test]
async fn overridden_texts_replace_the_built_in_ones() {
    let (b, provider, _) = builder();
    let bot = b
        .text("en", botmesh_core::texts::keys::INVALID, "Try again, friend.")
        .flow(Flow::new("f").trigger(Trigger::keyword("go")).ask(Ask::new("x", "X?")))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.say("c", "   ");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["X?", "Try again, friend."]);
}

#[tokio::test]
async fn goto_ends_the_flow_and_starts_the_other_under_the_same_turn() {
    let (b, provider, rec) = builder();
    let bot = b
        .flow(Flow::new("menu").trigger(Trigger::keyword("menu")).do_step(
            "route",
            |c| async move {
                let choice = c.ask("1 to order").await?;
                if choice.body == "1" {
                    return Ok(c.goto("order"));
                }
                Ok::<_, BotError>(Step::End)
            },
        ))
        .flow(order_flow())
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "menu");
    provider.say("c", "1");
    provider.say("c", "S");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["1 to order", "Size?", "How many?"]);
    let ended: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConversationEnded { name, reason, .. } => Some((name, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(ended, [("menu".to_owned(), EndReason::Replaced)]);
}

#[tokio::test(start_paused = true)]
async fn a_conversation_times_out_when_the_answer_does_not_come() {
    let (b, provider, rec) = builder();
    let bot = b.flow(order_flow().timeout(Duration::from_secs(60))).build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "order");
    provider.wait_sent(1).await;
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(provider.sent_count(), 1, "no timeout before its time");
    tokio::time::sleep(Duration::from_secs(2)).await;
    provider.wait_sent(2).await;
    assert_eq!(
        provider.texts_to("c"),
        ["Size?", "This conversation timed out. Send a message to start again."]
    );
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Timeout, .. }))
    );
    // The chat is free again: the next message routes as a new one.
    provider.say("c", "order");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c").last().unwrap(), "Size?");
}

#[tokio::test(start_paused = true)]
async fn the_idle_watchdog_wakes_the_waiting_code() {
    let (b, provider, rec) = builder();
    let bot = b
        .flow(Flow::new("nudge").trigger(Trigger::keyword("go")).do_step("ask", |c| async move {
            c.idle(Duration::from_secs(30));
            let answer = match c.ask("Your email?").await {
                Ok(m) => m,
                // Nudge once; on the next silence the error ends the conversation quietly.
                Err(e) if e.is_idle() => {
                    c.send("Still there?").await?;
                    c.wait().await?
                }
                Err(e) => return Err(e),
            };
            c.send(format!("got {}", answer.body)).await?;
            Ok(Step::End)
        }))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.wait_sent(1).await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    provider.wait_sent(2).await;
    assert_eq!(provider.texts_to("c"), ["Your email?", "Still there?"]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    provider.settled(&bot).await;
    // Let the worker run the second idle firing.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Idle, .. }))
    );
    assert_eq!(provider.sent_count(), 2, "the conversation ended quietly");
}

#[tokio::test]
async fn a_state_value_that_is_not_json_gives_a_clear_error() {
    let (b, provider, rec) = builder();
    let bot = b
        .flow(Flow::new("f").trigger(Trigger::keyword("go")).do_step("bad", |c| async move {
            // A map with non-string keys has no JSON form.
            let mut m = std::collections::HashMap::new();
            m.insert((1, 2), "x");
            c.set("pairs", m)?;
            Ok::<_, BotError>(Step::End)
        }))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.settled(&bot).await;
    let errors = rec.errors();
    assert_eq!(errors.len(), 1);
    match &*errors[0] {
        BotError::StateNotJson { name, field, .. } => {
            assert_eq!((name.as_str(), field.as_str()), ("f", "pairs"))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(errors[0].to_string().contains("not plain JSON"));
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Failed, .. }))
    );
    assert!(provider.sent().is_empty());
}

#[tokio::test]
async fn a_do_step_can_ask_several_questions() {
    let (b, provider, _) = builder();
    let bot = b
        .flow(Flow::new("form").trigger(Trigger::keyword("form")).do_step("both", |c| async move {
            let first = c.ask("First name?").await?;
            let last = c.ask("Last name?").await?;
            c.set("full", format!("{} {}", first.body, last.body))?;
            c.send(format!("Hello {}", c.get::<String>("full").unwrap())).await?;
            Ok::<_, BotError>(Step::Next)
        }))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    for t in ["form", "Ada", "Lovelace"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["First name?", "Last name?", "Hello Ada Lovelace"]);
}
