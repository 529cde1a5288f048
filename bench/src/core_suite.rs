//! `core`: messages per second through the whole single-process pipeline.
//!
//! Hooks, dedupe, the per-chat dispatcher, a handler and `TestProvider`, for 1,000 chats with
//! 100 messages each, sent interleaved as many users at once would.
//!
//! `echo_msgs_per_s` and `echo_metrics_msgs_per_s` are the echo load with the Prometheus
//! exporter off and on (the median of five alternating runs each), and
//! `core_metrics_cost_pct` what recording costs in throughput.

use std::time::Instant;

use botmesh_core::{Ask, Bot, BotBuilder, BotError, Flow, Trigger};
use botmesh_testing::TestProvider;

use crate::{Figures, metered};

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
    // The echo load with the Prometheus exporter off and on, alternating (see `metered.rs`).
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        metered::exporter(false)?;
        off.push(measure(echo_bot(), |_, _| "Hello").await?);
        metered::exporter(true)?;
        on.push(measure(echo_bot(), |_, _| "Hello").await?);
    }
    metered::exporter(false)?;
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_some() {
        eprintln!("echo runs, exporter off: {off:.0?}\necho runs, exporter on:  {on:.0?}");
    }
    if metered::scrape() == 0 {
        return Err("the exporter recorded nothing".into());
    }
    let (echo, echo_metrics) = (metered::median(off), metered::median(on));
    // 100 messages per chat: 33 full runs of the flow and a final `go`.
    let flow = measure(flow_bot(), |_, i| match i % 3 {
        0 => "go",
        1 => "x",
        _ => "y",
    })
    .await?;
    Ok(vec![
        ("echo_msgs_per_s", echo, "msg/s"),
        ("echo_metrics_msgs_per_s", echo_metrics, "msg/s"),
        ("core_metrics_cost_pct", (1.0 - echo_metrics / echo) * 100.0, "%"),
        ("flow_msgs_per_s", flow, "msg/s"),
    ])
}
