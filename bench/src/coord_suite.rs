//! `coord`: three replicas on one in-memory hub against one bot without coordination, the
//! turn hand-off latency between replicas on one contended chat, and what a new chat costs.
//!
//! - `new_chats_burst_ms`: 200 messages, each to a chat never seen before, spread over three
//!   replicas on the hub at once (a broadcast's replies coming in), until all are handled; the
//!   mean of 20 such bursts. Every chat's first message starts its worker and its ticketer.
//! - `new_chat_alloc_bytes`: the bytes the process allocated per message in those bursts: the
//!   chat's tasks and queues, most of which it keeps while the chat lingers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloc_tracker::ReportOperation;
use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotBuilder, BotError, Inbound, MemoryStore, MessageId};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};

use crate::common::{percentile, spread};
use crate::{Figures, allocs};

fn echo(builder: BotBuilder) -> BotBuilder {
    builder.on_message(|ctx| async move {
        ctx.reply(ctx.body().to_owned()).await?;
        Ok::<_, BotError>(())
    })
}

fn replica(
    hub: &MemoryCoordinationHub,
    store: &Arc<dyn Store>,
    id: &str,
) -> Result<(Bot, TestProvider), BotError> {
    let provider = TestProvider::new();
    let coordination = CoordinationConfig::new(MemoryCoordinator::new(hub.clone(), id)).build();
    let bot = echo(Bot::builder())
        .provider(provider.clone())
        .store(Arc::clone(store))
        .coordination(coordination)
        .build()?;
    Ok((bot, provider))
}

async fn handoffs() -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    const MESSAGES: usize = 2_000;
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log: Arc<Mutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
    let mut replicas = Vec::new();
    for (i, id) in ["a", "b"].into_iter().enumerate() {
        let provider = TestProvider::new();
        let log = Arc::clone(&log);
        let bot = Bot::builder()
            .provider(provider.clone())
            .store(Arc::clone(&store))
            .coordination(CoordinationConfig::new(MemoryCoordinator::new(hub.clone(), id)).build())
            .on_message(move |ctx| {
                let log = Arc::clone(&log);
                async move {
                    let start = Instant::now();
                    ctx.reply("ok").await?;
                    log.lock().map_err(|_| "poisoned")?.push((i, start, Instant::now()));
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
                }
            })
            .build()?;
        bot.start().await?;
        replicas.push((bot, provider));
    }
    // Everything is queued up front, so every switch between replicas is a real hand-off:
    // the next ticket's owner was already waiting when the turn was released.
    for m in 0..MESSAGES {
        replicas[m % 2].1.say("contended", "x");
    }
    for (bot, provider) in &replicas {
        provider.settled(bot).await;
    }
    let mut log = log.lock().map_err(|_| "poisoned")?.clone();
    log.sort_by_key(|e| e.1);
    let mut gaps: Vec<f64> = log
        .windows(2)
        .filter(|w| w[0].0 != w[1].0)
        .map(|w| w[1].1.saturating_duration_since(w[0].2).as_secs_f64() * 1e6)
        .collect();
    gaps.sort_by(f64::total_cmp);
    for (bot, _) in &replicas {
        bot.stop().await?;
    }
    if gaps.is_empty() {
        return Err("no hand-offs between replicas were observed".into());
    }
    Ok(gaps)
}

/// The new-chat bursts: the mean time a burst took (ms) and the bytes allocated per message.
async fn new_chats() -> Result<(f64, f64), Box<dyn std::error::Error>> {
    const BURSTS: usize = 20;
    const PER_BURST: usize = 200;
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let replicas =
        [replica(&hub, &store, "a")?, replica(&hub, &store, "b")?, replica(&hub, &store, "c")?];
    for (bot, _) in &replicas {
        bot.start().await?;
    }
    let bursts = async {
        let mut took = Duration::ZERO;
        for b in 0..BURSTS {
            let started = Instant::now();
            for c in 0..PER_BURST {
                let chat = format!("new-{b}-{c}");
                let id = MessageId::from(chat.clone());
                replicas[c % 3].1.inject(Inbound::text("test", id, chat.as_str(), "hi"));
            }
            for (bot, provider) in &replicas {
                provider.settled(bot).await;
            }
            took += started.elapsed();
        }
        took
    };
    let (took, bytes) =
        allocs::per_iteration((BURSTS * PER_BURST) as u64, bursts, ReportOperation::bytes).await?;
    let sent: usize = replicas.iter().map(|(_, p)| p.sent_count()).sum();
    for (bot, _) in &replicas {
        bot.stop().await?;
    }
    if sent != BURSTS * PER_BURST {
        return Err(format!("{sent} replies for {} messages", BURSTS * PER_BURST).into());
    }
    Ok((took.as_secs_f64() * 1e3 / BURSTS as f64, bytes))
}

pub(crate) async fn run() -> Result<Figures, Box<dyn std::error::Error>> {
    let single = {
        let provider = TestProvider::new();
        let bot = echo(Bot::builder()).provider(provider.clone()).build()?;
        bot.start().await?;
        spread(&[(bot, provider)]).await?
    };
    let hub3 = {
        let hub = MemoryCoordinationHub::new();
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let replicas = vec![
            replica(&hub, &store, "a")?,
            replica(&hub, &store, "b")?,
            replica(&hub, &store, "c")?,
        ];
        for (bot, _) in &replicas {
            bot.start().await?;
        }
        spread(&replicas).await?
    };
    let gaps = handoffs().await?;
    let (burst_ms, chat_bytes) = new_chats().await?;
    Ok(vec![
        ("single_msgs_per_s", single, "msg/s"),
        ("hub3_msgs_per_s", hub3, "msg/s"),
        ("handoff_p50_us", percentile(&gaps, 0.50), "us"),
        ("handoff_p99_us", percentile(&gaps, 0.99), "us"),
        ("new_chats_burst_ms", burst_ms, "ms"),
        ("new_chat_alloc_bytes", chat_bytes, "bytes/msg"),
    ])
}
