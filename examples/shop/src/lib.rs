//! A shop bot: a persistent order flow with validation, a free-form support conversation,
//! and reminders. `cancel` (or `stop`, `/cancel`, `cancelar`) leaves whatever is waiting for an
//! answer, and `order` or `help` interrupt a reminder being set up.
//!
//! `main.rs` runs it in the terminal; the integration tests drive [`bot`] with a
//! `TestProvider`.

use std::time::Duration;

use botmesh_core::texts::keys;
use botmesh_core::{Ask, BotBuilder, BotError, Conversation, Flow, Step, Trigger};
use serde_json::json;

pub mod console;

/// The price of one T-shirt of `size`, in dollars.
pub fn price(size: &str) -> Option<u32> {
    match size {
        "S" => Some(10),
        "M" => Some(12),
        "L" => Some(14),
        _ => None,
    }
}

/// The order flow: size, quantity, confirmation. Persistent, so an order in progress
/// survives a restart on a shared store.
pub fn order_flow() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keywords(["order", "pedido"]))
        // Starts even while a reminder is being set up, which then ends.
        .interrupts(true)
        .persistent()
        .timeout(Duration::from_secs(15 * 60))
        .ask(Ask::new("size", "Which size would you like? S, M or L").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many? (1 to 10)").validate(
            |m| match m.body.trim().parse::<u32>() {
                Ok(n @ 1..=10) => Ok(json!(n)),
                _ => Err("Please send a number from 1 to 10.".to_owned()),
            },
        ))
        .do_step("confirm", |c| async move {
            let size: String = c.get("size").unwrap_or_default();
            let qty: u32 = c.get("qty").unwrap_or(1);
            let total = price(&size).unwrap_or(0) * qty;
            let answer = loop {
                let m = c
                    .ask(format!("{qty} x {size} T-shirt, ${total} in all. Confirm? (yes/no)"))
                    .await?;
                match m.body.trim().to_lowercase().as_str() {
                    "yes" | "y" | "si" | "sí" => break true,
                    "no" | "n" => break false,
                    _ => {
                        c.reply("Please answer yes or no.").await?;
                    }
                }
            };
            if !answer {
                c.send("Order cancelled. Send 'order' to start again.").await?;
                return Ok(Step::End);
            }
            let mut user = c.user().await?;
            let orders = user["orders"].as_u64().unwrap_or(0) + 1;
            user["orders"] = json!(orders);
            c.set_user(&user).await?;
            c.send(format!(
                "Order placed: {qty} x {size} for ${total}. That's order #{orders} for you. Thanks!"
            ))
            .await?;
            Ok::<_, BotError>(Step::Next)
        })
}

/// A free-form support conversation: collects a description until the user says `done`.
pub fn support() -> Conversation {
    Conversation::new("support", |c| async move {
        let first = c.ask("Sorry to hear that. What went wrong?").await?;
        let mut notes = vec![first.body];
        loop {
            let m = c.ask("Anything else? Send 'done' when finished.").await?;
            if m.body.trim().eq_ignore_ascii_case("done") {
                break;
            }
            notes.push(m.body);
        }
        c.send(format!(
            "Thanks. Ticket opened with {} note(s); we'll get back to you.",
            notes.len()
        ))
        .await?;
        Ok::<_, BotError>(())
    })
    .trigger(Trigger::keywords(["help", "ayuda"]))
    .interrupts(true)
    .timeout(Duration::from_secs(10 * 60))
}

/// A reminder: asks what and when, then sends it after that many seconds.
pub fn remind_flow() -> Flow {
    Flow::new("remind")
        .trigger(Trigger::keyword("remind"))
        .ask(Ask::new("what", "What should I remind you about?"))
        .ask(Ask::new("secs", "In how many seconds?").validate(|m| {
            match m.body.trim().parse::<u64>() {
                Ok(n @ 1..=86_400) => Ok(json!(n)),
                _ => Err("Please send a number of seconds (1 to 86400).".to_owned()),
            }
        }))
        .do_step("schedule", |c| async move {
            let what: String = c.get("what").unwrap_or_default();
            let secs: u64 = c.get("secs").unwrap_or(60);
            c.send(format!("OK, I'll remind you in {secs} s.")).await?;
            // The reminder runs outside the chat's turn, so the chat stays free meanwhile.
            let later = c.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                if let Err(e) = later.send(format!("Reminder: {what}")).await {
                    tracing_warn(&e);
                }
            });
            Ok::<_, BotError>(Step::Next)
        })
}

fn tracing_warn(e: &BotError) {
    eprintln!("reminder could not be sent: {e}");
}

/// The shop bot's definition, ready for a provider and a store.
pub fn bot(builder: BotBuilder) -> BotBuilder {
    builder
        // cancel, stop, /cancel (cancelar in Spanish): leaves any flow or conversation.
        .cancel_on(Trigger::text(keys::CANCEL_WORDS))
        .flow(order_flow())
        .flow(remind_flow())
        .conversation(support())
        .on_message(|ctx| async move {
            ctx.reply("Hi! Send 'order' to buy a T-shirt, 'help' for support, or 'remind' for a reminder.")
                .await?;
            Ok::<_, BotError>(())
        })
}
