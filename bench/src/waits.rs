//! Waiting for a turn, over one private Redis: part of the `redis` suite, and the `waits`
//! suite on its own.
//!
//! - `polls_while_waiting`: 1,000 chats whose turns replica `a` holds in a 12-second handler,
//!   each with a message queued behind it on replica `b`. For 10 seconds once all wait, every
//!   command a client sends Redis is watched (`MONITOR`): those that are neither a heartbeat
//!   (the liveness `SET`s, the status publishes, and the liveness reads of the incarnations
//!   the waiters wait behind, which cost one command per incarnation, not per waiter) count
//!   as polls. `heartbeat_cmds_while_waiting` is the number of the others.
//! - `w3_wait_p50_ms`, `w3_wait_p99_ms`, `w3_handoff_p50_us`, `w3_handoff_p99_us`: 200 chats ×
//!   10 messages arriving 20 ms apart at three replicas in one process (each message to a
//!   random replica), a 50 ms handler. A message's wait is its handler's start minus its
//!   arrival; an ideal FIFO, where each message starts the moment the one before it in its
//!   chat ends, gives waits of 0, 30, 60, … 270 ms (a p50 of 120 ms). A hand-off is the start
//!   of a message that was already waiting minus the end of the one before it in its chat:
//!   the coordination's own share of the wait.
//! - `w3_script_calls_per_msg`, `w3_redis_cpu_us_per_msg`, `w3_process_cpu_us_per_msg`: what
//!   the load cost, from its first message until all were handled: the script calls Redis ran
//!   (its round trips), Redis's CPU time and this process's (the three replicas, the handlers'
//!   timer thread and the load itself), per message. Calls carry few steps in this load, so
//!   each call's own cost on both sides weighs more per message than under a flood.
//! - `w3_handler_mean_ms`: how long the handler took. It sleeps on a timer thread of its own
//!   (see `precise.rs`): tokio's millisecond ticks would make it about 51.2 ms, and every
//!   message's wait would grow by the excess over the ideal schedule's 30 ms per message.
//! - `w3_hub_wait_p50_ms`, `w3_hub_wait_p99_ms`, `w3_hub_handoff_p50_us`,
//!   `w3_hub_process_cpu_us_per_msg`: the same load with the three replicas coordinating
//!   through the in-process hub instead of Redis: what the framework costs on this machine
//!   without a network (200 chats' messages arrive at once, and two cores start their
//!   handlers one after another), under the Redis figures.
//! - `w3_floor_wait_p50_ms`, `w3_floor_wait_p99_ms`: the same arrivals and the same handler
//!   without botmesh at all: one task per chat takes its messages in order from a channel.
//!   What the machine, tokio and the handler's timer reach on their own, under the hub's
//!   figures: the hub's distance to it is the framework's, the Redis figures' distance to the
//!   hub's is the coordination's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, Inbound, MemoryStore, MessageId};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};
use futures_util::StreamExt;

use crate::common::{Res, percentile, process_cpu_s};
use crate::redis_suite::{coordinated, redis_cpu_s, reset_stats, script_calls_executed};

/// What a client sent Redis while the chats waited, by kind.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    /// Heartbeats: liveness `SET`s, status publishes, liveness reads.
    pub(crate) heartbeats: u64,
    /// Everything else: per-chat polls.
    pub(crate) polls: u64,
}

/// Sorts one `MONITOR` line: `TIME [DB CLIENT] "CMD" "ARG" …`. Lines of scripts (`lua`) and
/// of the watcher's own commands are left out.
fn classify(line: &str, watched: &mut Watched) {
    let Some((client, command)) = line.split_once("] ") else { return };
    if client.ends_with(" lua") {
        return;
    }
    let lower = command.to_ascii_lowercase();
    let heartbeat = (lower.starts_with("\"set\"") && lower.contains(":coord:r:"))
        || (lower.starts_with("\"pttl\"") && lower.contains(":coord:r:"))
        || (lower.starts_with("\"exists\"") && lower.contains(":coord:r:"))
        || lower.contains(":coord:replicas:");
    if heartbeat {
        watched.heartbeats += 1;
    } else if !lower.starts_with("\"info\"") && !lower.starts_with("\"config\"") {
        watched.polls += 1;
    }
}

/// The `polls_while_waiting` load: returns what clients sent Redis in the 10-second window.
pub(crate) async fn polls_while_waiting(url: &str) -> Res<Watched> {
    const CHATS: usize = 1_000;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let holding = Arc::new(AtomicUsize::new(0));
    let held = Arc::clone(&holding);
    let slow = Bot::builder().on_message(move |_ctx| {
        let held = Arc::clone(&held);
        async move {
            held.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(12)).await;
            Ok::<_, BotError>(())
        }
    });
    let (a, pa) = coordinated(url, "pw", "a", Arc::clone(&store), slow).await?;
    let quick = Bot::builder().on_message(|_ctx| async { Ok::<_, BotError>(()) });
    let (b, pb) = coordinated(url, "pw", "b", Arc::clone(&store), quick).await?;
    for c in 0..CHATS {
        pa.say(&format!("chat-{c}"), "hold");
    }
    // Every turn held by `a` (generous: 1,000 handlers start within a few hundred ms).
    let deadline = Instant::now() + Duration::from_secs(30);
    while holding.load(Ordering::SeqCst) < CHATS {
        if Instant::now() > deadline {
            return Err("replica a did not take every turn within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for c in 0..CHATS {
        pb.say(&format!("chat-{c}"), "wait");
    }
    // Every ticket of `b` queued: a second is far more than 1,000 ticket calls take here.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let monitor = redis::Client::open(url)?.get_async_monitor().await?;
    let mut lines = monitor.into_on_message::<String>();
    let mut watched = Watched::default();
    let window = tokio::time::sleep(Duration::from_secs(10));
    tokio::pin!(window);
    loop {
        tokio::select! {
            () = &mut window => break,
            line = lines.next() => match line {
                Some(line) => classify(&line, &mut watched),
                None => return Err("the MONITOR connection closed".into()),
            },
        }
    }
    drop(lines);
    if holding.load(Ordering::SeqCst) != CHATS || !pb.sent().is_empty() {
        return Err("a waiting message ran before the window ended".into());
    }
    pa.settled(&a).await;
    pb.settled(&b).await;
    a.stop().await?;
    b.stop().await?;
    Ok(watched)
}

/// The ordered-arrival load: chats, messages per chat, the time between a chat's arrivals,
/// and the handler's.
const CHATS: usize = 200;
const PER_CHAT: usize = 10;
const ARRIVALS_EVERY: Duration = Duration::from_millis(20);
const HANDLER: Duration = Duration::from_millis(50);

/// One handled message: chat, index in its chat, handler start and end.
type Span = (usize, usize, Instant, Instant);

/// The w3 figures: waits (ms) and hand-offs (µs), each sorted, the handler's mean time, and
/// what the load cost per message.
pub(crate) struct W3 {
    pub(crate) waits_ms: Vec<f64>,
    pub(crate) handoffs_us: Vec<f64>,
    pub(crate) handler_ms: f64,
    pub(crate) cost: Cost,
}

/// What the w3 load cost per message: this process's CPU time (µs), and on Redis, the script
/// calls Redis ran and its CPU time (µs).
pub(crate) struct Cost {
    process_cpu_us: f64,
    redis: Option<(f64, f64)>,
}

/// How the w3 load's replicas coordinate.
#[derive(Clone, Copy)]
pub(crate) enum Mesh<'a> {
    /// Through the Redis at this URL.
    Redis(&'a str),
    /// Through an in-process hub.
    Hub,
}

/// The ordered-arrival load: 200 chats × 10 messages 20 ms apart, three replicas, a 50 ms
/// handler.
pub(crate) async fn ordered_arrivals(mesh: Mesh<'_>) -> Res<W3> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log: Arc<Mutex<Vec<Span>>> = Arc::default();
    let mut replicas = Vec::new();
    let hub = MemoryCoordinationHub::new();
    for id in ["a", "b", "c"] {
        let log = Arc::clone(&log);
        let builder = Bot::builder().on_message(move |ctx| {
            let log = Arc::clone(&log);
            async move {
                let start = Instant::now();
                let body = ctx.body();
                let (chat, n) = body.split_once(' ').ok_or("no index")?;
                let (chat, n): (usize, usize) = (chat.parse()?, n.parse()?);
                crate::precise::sleep(HANDLER).await;
                log.lock().map_err(|_| "poisoned")?.push((chat, n, start, Instant::now()));
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }
        });
        replicas.push(match mesh {
            Mesh::Redis(url) => coordinated(url, "w3", id, Arc::clone(&store), builder).await?,
            Mesh::Hub => {
                let coordinator = MemoryCoordinator::new(hub.clone(), id);
                let provider = TestProvider::new();
                let bot = builder
                    .provider(provider.clone())
                    .store(Arc::clone(&store))
                    .coordination(CoordinationConfig::new(coordinator).build())
                    .build()?;
                bot.start().await?;
                (bot, provider)
            }
        });
    }
    let redis_cpu = match mesh {
        Mesh::Redis(url) => {
            reset_stats(url).await?;
            redis_cpu_s(url).await?
        }
        Mesh::Hub => 0.0,
    };
    let process_cpu = process_cpu_s()?;
    let mut arrivals: HashMap<(usize, usize), Instant> = HashMap::new();
    let mut pick: u64 = 0x2545_F491_4F6C_DD1D;
    let mut tick = tokio::time::interval(ARRIVALS_EVERY);
    for n in 0..PER_CHAT {
        tick.tick().await;
        for c in 0..CHATS {
            pick ^= pick << 13;
            pick ^= pick >> 7;
            pick ^= pick << 17;
            let provider = &replicas[(pick % 3) as usize].1;
            let id = MessageId::from(format!("{n}-{c}"));
            arrivals.insert((c, n), Instant::now());
            let _ = provider.inject(Inbound::text(
                "test",
                id,
                format!("chat-{c}").as_str(),
                format!("{c} {n}").as_str(),
            ));
        }
    }
    for (bot, provider) in &replicas {
        provider.settled(bot).await;
    }
    let messages = (CHATS * PER_CHAT) as f64;
    let process_cpu_us = (process_cpu_s()? - process_cpu) * 1e6 / messages;
    let redis = match mesh {
        Mesh::Redis(url) => Some((
            script_calls_executed(url).await? as f64 / messages,
            (redis_cpu_s(url).await? - redis_cpu) * 1e6 / messages,
        )),
        Mesh::Hub => None,
    };
    let cost = Cost { process_cpu_us, redis };
    for (bot, _) in &replicas {
        bot.stop().await?;
    }
    let mut log = log.lock().map_err(|_| "poisoned")?.clone();
    if log.len() != CHATS * PER_CHAT {
        return Err(format!("{} messages handled of {}", log.len(), CHATS * PER_CHAT).into());
    }
    log.sort_by_key(|&(chat, n, ..)| (chat, n));
    let mut waits_ms = Vec::with_capacity(log.len());
    let mut handoffs_us = Vec::new();
    for (i, &(chat, n, start, _)) in log.iter().enumerate() {
        let arrived = arrivals.get(&(chat, n)).copied().ok_or("an unknown message")?;
        waits_ms.push(start.saturating_duration_since(arrived).as_secs_f64() * 1e3);
        if n > 0
            && let Some(&(prev_chat, prev_n, _, prev_end)) =
                i.checked_sub(1).and_then(|p| log.get(p))
            && prev_chat == chat
            && prev_n + 1 == n
        {
            if start < prev_end {
                return Err(
                    format!("chat {chat}: message {n} started before {prev_n} ended").into()
                );
            }
            if arrived < prev_end {
                handoffs_us.push(start.duration_since(prev_end).as_secs_f64() * 1e6);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let work: Vec<f64> = log.iter().map(|&(.., s, e)| ms(e - s)).collect();
    let handler_ms = mean(&work);
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_some() {
        for k in 0..PER_CHAT {
            let waits: Vec<f64> = log
                .iter()
                .filter(|&&(_, n, ..)| n == k)
                .filter_map(|&(c, n, s, _)| {
                    Some(ms(s.saturating_duration_since(*arrivals.get(&(c, n))?)))
                })
                .collect();
            let mut sorted = waits.clone();
            sorted.sort_by(f64::total_cmp);
            eprintln!(
                "w3 ({}): message {k}: wait mean {:.2} ms (ideal {} ms), min {:.2}, p50 {:.2}, \
                 max {:.2}",
                match mesh {
                    Mesh::Redis(_) => "redis",
                    Mesh::Hub => "hub",
                },
                mean(&waits),
                30 * k,
                sorted.first().copied().unwrap_or_default(),
                percentile(&sorted, 0.5),
                sorted.last().copied().unwrap_or_default()
            );
        }
    }
    waits_ms.sort_by(f64::total_cmp);
    handoffs_us.sort_by(f64::total_cmp);
    if handoffs_us.is_empty() {
        return Err("no message waited for the one before it".into());
    }
    Ok(W3 { waits_ms, handoffs_us, handler_ms, cost })
}

/// The ordered-arrival load without botmesh (see the module's docs): returns the waits (ms),
/// sorted.
pub(crate) async fn floor() -> Res<Vec<f64>> {
    let waits: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::with_capacity(CHATS * PER_CHAT)));
    let mut chats = Vec::with_capacity(CHATS);
    let mut tasks = Vec::with_capacity(CHATS);
    for _ in 0..CHATS {
        let (arrive, mut arrived) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        chats.push(arrive);
        let waits = Arc::clone(&waits);
        tasks.push(tokio::spawn(async move {
            while let Some(at) = arrived.recv().await {
                let wait = at.elapsed().as_secs_f64() * 1e3;
                waits.lock().map_err(|_| "poisoned")?.push(wait);
                crate::precise::sleep(HANDLER).await;
            }
            Ok::<_, &'static str>(())
        }));
    }
    let mut tick = tokio::time::interval(ARRIVALS_EVERY);
    for _ in 0..PER_CHAT {
        tick.tick().await;
        for chat in &chats {
            chat.send(Instant::now()).map_err(|_| "a chat's task ended early")?;
        }
    }
    drop(chats);
    for task in tasks {
        task.await??;
    }
    let mut waits = std::mem::take(&mut *waits.lock().map_err(|_| "poisoned")?);
    if waits.len() != CHATS * PER_CHAT {
        return Err(format!("{} messages handled of {}", waits.len(), CHATS * PER_CHAT).into());
    }
    waits.sort_by(f64::total_cmp);
    Ok(waits)
}

/// The w3 figures, named.
pub(crate) fn w3_figures(w3: &W3) -> Vec<(&'static str, f64, &'static str)> {
    let mut figures = vec![
        ("w3_wait_p50_ms", percentile(&w3.waits_ms, 0.50), "ms"),
        ("w3_wait_p99_ms", percentile(&w3.waits_ms, 0.99), "ms"),
        ("w3_handoff_p50_us", percentile(&w3.handoffs_us, 0.50), "us"),
        ("w3_handoff_p99_us", percentile(&w3.handoffs_us, 0.99), "us"),
    ];
    if let Some((calls, redis_cpu_us)) = w3.cost.redis {
        figures.push(("w3_script_calls_per_msg", calls, "calls/msg"));
        figures.push(("w3_redis_cpu_us_per_msg", redis_cpu_us, "us/msg"));
    }
    figures.push(("w3_process_cpu_us_per_msg", w3.cost.process_cpu_us, "us/msg"));
    figures.push(("w3_handler_mean_ms", w3.handler_ms, "ms"));
    figures
}

/// The w3 figures of the load without botmesh, named.
pub(crate) fn w3_floor_figures(waits: &[f64]) -> [(&'static str, f64, &'static str); 2] {
    [
        ("w3_floor_wait_p50_ms", percentile(waits, 0.50), "ms"),
        ("w3_floor_wait_p99_ms", percentile(waits, 0.99), "ms"),
    ]
}

/// The w3 figures of the load on the in-process hub, named.
pub(crate) fn w3_hub_figures(w3: &W3) -> [(&'static str, f64, &'static str); 4] {
    [
        ("w3_hub_wait_p50_ms", percentile(&w3.waits_ms, 0.50), "ms"),
        ("w3_hub_wait_p99_ms", percentile(&w3.waits_ms, 0.99), "ms"),
        ("w3_hub_handoff_p50_us", percentile(&w3.handoffs_us, 0.50), "us"),
        ("w3_hub_process_cpu_us_per_msg", w3.cost.process_cpu_us, "us/msg"),
    ]
}

/// The `waits` suite: these figures alone, on a Redis of their own.
pub(crate) async fn run() -> Res<crate::Figures> {
    let server = botmesh_testing::RedisServer::start()?;
    let url = server.url();
    let watched = polls_while_waiting(&url).await?;
    let w3 = ordered_arrivals(Mesh::Redis(&url)).await?;
    crate::redis_suite::show_stats(&url).await?;
    let hub = ordered_arrivals(Mesh::Hub).await?;
    let floor = floor().await?;
    let mut figures = vec![
        ("polls_while_waiting", watched.polls as f64, "commands"),
        ("heartbeat_cmds_while_waiting", watched.heartbeats as f64, "commands"),
    ];
    figures.extend(w3_figures(&w3));
    figures.extend(w3_hub_figures(&hub));
    figures.extend(w3_floor_figures(&floor));
    Ok(figures)
}
