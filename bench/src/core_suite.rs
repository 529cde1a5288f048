//! `core`: messages per second through the whole single-process pipeline.
//!
//! Hooks, dedupe, the per-chat dispatcher, a handler and `TestProvider`, for 1,000 chats with
//! 100 messages each, sent interleaved as many users at once would.

use std::time::Instant;

use botmesh_core::{Ask, Bot, BotBuilder, BotError, Flow, Trigger};
use botmesh_testing::TestProvider;

use crate::Figures;

const CHATS: usize = 1_000;
const PER_CHAT: usize = 100;

/// Sends `text(chat, i)` for every chat and index and returns messages per second.
async fn measure(
    builder: BotBuilder,
    text: impl Fn(usize, usize) -> &'static str,
) -> Result<f64, Box<dyn std::error::Error>> {
    let provider = TestProvider::new();
    let bot: Bot = builder.provider(provider.clone()).build()?;
    bot.start().await?;
    let chats: Vec<String> = (0..CHATS).map(|c| format!("chat-{c}")).collect();
    let started = Instant::now();
    for i in 0..PER_CHAT {
        for (c, chat) in chats.iter().enumerate() {
            provider.say(chat, text(c, i));
        }
    }
    provider.settled(&bot).await;
    let secs = started.elapsed().as_secs_f64();
    let sent = provider.sent_count();
    bot.stop().await?;
    if sent < CHATS * PER_CHAT {
        return Err(format!("only {sent} replies for {} messages", CHATS * PER_CHAT).into());
    }
    Ok((CHATS * PER_CHAT) as f64 / secs)
}

fn echo_bot() -> BotBuilder {
    Bot::builder()
        .before_message(|mut m| async move {
            m.body.make_ascii_lowercase();
            Ok::<_, BotError>(m)
        })
        .on_message(|ctx| async move {
            ctx.reply(ctx.body().to_owned()).await?;
            Ok::<_, BotError>(())
        })
}

/// A persistent two-step flow: `go` starts it, two answers finish it; every message gets
/// one reply (a prompt, or the closing line).
fn flow_bot() -> BotBuilder {
    Bot::builder().flow(
        Flow::new("two")
            .trigger(Trigger::keyword("go"))
            .persistent()
            .ask(Ask::new("a", "first?"))
            .ask(Ask::new("b", "second?"))
            .do_step("done", |c| async move {
                c.send("done").await?;
                Ok::<_, BotError>(botmesh_core::Step::Next)
            }),
    )
}

pub(crate) async fn run() -> Result<Figures, Box<dyn std::error::Error>> {
    // Warm up allocators and the runtime once, untimed.
    measure(echo_bot(), |_, _| "hi").await?;
    let echo = measure(echo_bot(), |_, _| "Hello").await?;
    // 100 messages per chat: 33 full runs of the flow and a final `go`.
    let flow = measure(flow_bot(), |_, i| match i % 3 {
        0 => "go",
        1 => "x",
        _ => "y",
    })
    .await?;
    Ok(vec![("echo_msgs_per_s", echo, "msg/s"), ("flow_msgs_per_s", flow, "msg/s")])
}
