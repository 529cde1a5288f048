//! `redis`: coordination over one private Redis.
//!
//! - `coord_roundtrips_per_msg`: Redis round trips per message on the uncontended path, from
//!   `INFO commandstats`: the script calls (the store is in memory here, so every script is
//!   coordination; the commands a script runs inside Redis are not round trips, and
//!   heartbeats are left out).
//! - `handoff_p50_us`, `handoff_p99_us`: one chat whose messages alternate between two replicas;
//!   `naive_handoff_p50_us`, `naive_handoff_p99_us`: the same with the naive lock below.
//! - `replicas3_metrics_off_msgs_per_s`, `replicas3_metrics_msgs_per_s`,
//!   `redis_metrics_cost_pct`: the `replicas3_msgs_per_s` load with the Prometheus exporter off
//!   and on (the median of three alternating runs each, at the end of the suite), and what
//!   recording costs.
//! - `replicas3_msgs_per_s`, `uncoordinated_msgs_per_s`, `naive_lock_msgs_per_s`: 1,000 chats ×
//!   100 messages spread over the bots like a load balancer, with `RedisStore` as the store:
//!   three coordinated replicas, one bot without coordination, and three bots that serialize
//!   each chat with a `SET NX PX` lock polled every 5 ms (a baseline that exists only here).
//! - `durable_extra_writes_per_msg`: the Redis commands per message that durability adds, with
//!   `RedisStore` as the store: round trips counted from `INFO commandstats` (script calls and
//!   plain commands, not the commands scripts run inside Redis), the durable run minus the same
//!   run without durability, each one replica made by its store (see [`replica`]).
//! - `durable_idle_p50_us`: the median time one durable message takes when it is alone (see
//!   [`durable_idle_p50_us`]): the latency of the round trips it waits for.
//! - `durable_msgs_per_s`: the `replicas3_msgs_per_s` load with durability on, each replica
//!   with a `RedisStore` of its own and the coordinator that store makes, as deployed (see
//!   [`replica`]); `durable_vs_replicas3_ratio` the one over the other.
//! - `redis_cmds_per_msg`: every command Redis executed during the `replicas3_msgs_per_s` load
//!   (the commands scripts run inside Redis included, heartbeats too), per message, from
//!   `INFO commandstats`.
//! - `redis_cpu_us_per_msg`, `durable_redis_cpu_us_per_msg`: the CPU time Redis spent (user
//!   and system, `INFO cpu`) during the `replicas3_msgs_per_s` and `durable_msgs_per_s` loads,
//!   per message; `durable_redis_cmds_per_msg` is `redis_cmds_per_msg` for the durable load.
//!   On two cores, what Redis spends per message is taken from what the replicas can.
//! - `process_cpu_us_per_msg`, `durable_process_cpu_us_per_msg`: the CPU time the bench
//!   process spent (user and system, all threads: the three replicas and the load's senders)
//!   during the same two loads, per message. With the Redis figures beside them, they say on
//!   which side of the wire what durability adds is spent.
//! - `allocs_per_msg`, `durable_allocs_per_msg`: allocations per message for one coordinated
//!   echo replica, without and with durability (see [`allocs_per_msg`]).
//! - `polls_while_waiting`, `heartbeat_cmds_while_waiting`, and the `w3_` figures: see
//!   `waits.rs`.
//! - `replicated_replicas3_msgs_per_s`, `wait_replicas3_msgs_per_s`, `wait_cost_us_per_msg`,
//!   `replicated_idle_p50_us`, `wait_idle_p50_us` and `sentinel_replicas3_msgs_per_s`: on a
//!   private master with a replica, and through Sentinel, at the end of the suite; see
//!   `replicated.rs` (also alone: `cargo xtask bench replicated`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloc_tracker::ReportOperation;
use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{DEFAULT_LEASE, Store};
use botmesh_core::{Bot, BotBuilder, BotError, Durability, MemoryStore};
use botmesh_redis_store::{RedisCoordinator, RedisStore};
use botmesh_testing::{RedisServer, TestProvider};

use crate::common::{CHATS, PER_CHAT, Res, lone_message_p50_us, percentile, process_cpu_s, spread};
use crate::{Figures, allocs, metered, replicated, waits};

fn echo(builder: BotBuilder) -> BotBuilder {
    builder.on_message(|ctx| async move {
        ctx.reply(ctx.body().to_owned()).await?;
        Ok::<_, BotError>(())
    })
}

pub(crate) async fn coordinated(
    url: &str,
    prefix: &str,
    id: &str,
    store: Arc<dyn Store>,
    builder: BotBuilder,
) -> Res<(Bot, TestProvider)> {
    let provider = TestProvider::new();
    let coordinator = RedisCoordinator::new(url, prefix).await?.with_replica_id(id);
    let bot = builder
        .provider(provider.clone())
        .store(store)
        .coordination(CoordinationConfig::new(coordinator).build())
        .build()?;
    bot.start().await?;
    Ok((bot, provider))
}

/// A replica the way a deployment runs one: a `RedisStore` of its own (one connection), and
/// the coordinator it makes, which shares the connection (and, where it can, writes the
/// store's journal with its tickets and releases).
pub(crate) async fn replica(
    url: &str,
    prefix: &str,
    id: &str,
    builder: BotBuilder,
) -> Res<(Bot, TestProvider)> {
    let store = RedisStore::new(url, prefix).await?;
    let coordinator = store.coordinator(DEFAULT_LEASE).with_replica_id(id);
    let provider = TestProvider::new();
    let bot = builder
        .provider(provider.clone())
        .store(Arc::new(store))
        .coordination(CoordinationConfig::new(coordinator).build())
        .build()?;
    bot.start().await?;
    Ok((bot, provider))
}

async fn flush(url: &str) -> Res<()> {
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut conn).await?;
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(&mut conn).await?;
    Ok(())
}

pub(crate) async fn reset_stats(url: &str) -> Res<()> {
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(&mut conn).await?;
    Ok(())
}

/// Every command Redis executed since the last reset, the commands scripts ran inside it
/// included, from `INFO commandstats` (the bench's own `INFO` and `CONFIG` left out).
async fn commands_executed(url: &str) -> Res<u64> {
    executed(url, |l| !l.starts_with("info:") && !l.starts_with("config|")).await
}

/// The script calls Redis executed since the last reset: its round trips of coordination.
pub(crate) async fn script_calls_executed(url: &str) -> Res<u64> {
    executed(url, |l| SCRIPT_CALLS.iter().any(|p| l.starts_with(p))).await
}

/// The calls of the commands `counted` keeps (see [`calls`]) Redis executed since the last
/// reset.
async fn executed(url: &str, counted: impl Fn(&str) -> bool) -> Res<u64> {
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    Ok(calls(&stats, counted))
}

/// The CPU time Redis has used since it started, user and system, in seconds (`INFO cpu`).
pub(crate) async fn redis_cpu_s(url: &str) -> Res<f64> {
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("INFO cpu has no {name}"))
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// What one load run over `replicas` measured: its rate, and per message, every command
/// Redis executed (scripts' inner commands included, heartbeats too), the CPU time Redis
/// spent and the CPU time this process spent.
struct Load {
    msgs_per_s: f64,
    cmds_per_msg: f64,
    redis_cpu_us_per_msg: f64,
    process_cpu_us_per_msg: f64,
}

/// Runs the 1,000 chats × 100 messages load over `replicas` (see [`spread`]), with Redis's
/// command counts reset first.
async fn load_run(url: &str, replicas: &[(Bot, TestProvider)]) -> Res<Load> {
    reset_stats(url).await?;
    let (cpu, own) = (redis_cpu_s(url).await?, process_cpu_s()?);
    let msgs_per_s = spread(replicas).await?;
    let messages = (CHATS * PER_CHAT) as f64;
    let process_cpu_us_per_msg = (process_cpu_s()? - own) * 1e6 / messages;
    let redis_cpu_us_per_msg = (redis_cpu_s(url).await? - cpu) * 1e6 / messages;
    let cmds_per_msg = commands_executed(url).await? as f64 / messages;
    show_stats(url).await?;
    Ok(Load { msgs_per_s, cmds_per_msg, redis_cpu_us_per_msg, process_cpu_us_per_msg })
}

/// The calls `INFO commandstats` counts for the commands `counted` keeps (given each line
/// after its `cmdstat_`, such as `evalsha:calls=3,...`).
fn calls(stats: &str, counted: impl Fn(&str) -> bool) -> u64 {
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| counted(l))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Allocations per message for one coordinated echo replica: 200 chats × 100 messages, after
/// a warm-up, counted by the bench's allocator over the whole process. Without durability the
/// store is in memory (the turn path alone); with it, the store is `RedisStore`, so its
/// journal writes count too.
async fn allocs_per_msg(url: &str, durable: bool) -> Res<f64> {
    const CHATS: usize = 200;
    const PER_CHAT: usize = 100;
    let (bot, provider) = if durable {
        replica(url, "al", "a", echo(Bot::builder()).durability(Durability::new())).await?
    } else {
        coordinated(url, "al", "a", Arc::new(MemoryStore::new()), echo(Bot::builder())).await?
    };
    let chats: Vec<String> = (0..CHATS).map(|c| format!("chat-{c}")).collect();
    for chat in &chats {
        provider.say(chat, "warm");
    }
    provider.settled(&bot).await;
    let load = async {
        for _ in 0..PER_CHAT {
            for chat in &chats {
                provider.say(chat, "hello");
            }
        }
        provider.settled(&bot).await;
    };
    let ((), per_message) =
        allocs::per_iteration((CHATS * PER_CHAT) as u64, load, ReportOperation::allocations)
            .await?;
    bot.stop().await?;
    Ok(per_message)
}

/// The script calls a Redis round trip can be: every command a script runs inside Redis is
/// counted in `INFO commandstats` too, but is not a round trip.
const SCRIPT_CALLS: &[&str] = &["eval:", "evalsha:", "eval_ro:", "evalsha_ro:"];

/// The plain commands the store sends on its own (next to its scripts).
const PLAIN_CALLS: &[&str] = &["set:", "get:", "del:", "exists:", "hmget:"];

/// Round trips per message for one coordinated echo bot handling 2,000 messages of as many
/// chats, counted from `INFO commandstats` as the calls of `commands` (heartbeats aside: they
/// are `SET`s on their own connection, a handful per run).
async fn round_trips_per_msg(
    url: &str,
    (bot, provider): (Bot, TestProvider),
    commands: &[&str],
) -> Res<f64> {
    const MESSAGES: usize = 2_000;
    // Warm up: load the scripts once.
    provider.say("warm", "x");
    provider.settled(&bot).await;
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(&mut conn).await?;
    for m in 0..MESSAGES {
        provider.say(&format!("chat-{m}"), "x");
    }
    provider.settled(&bot).await;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    bot.stop().await?;
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_some() {
        eprintln!("{stats}");
    }
    let calls = calls(&stats, |l| commands.iter().any(|p| l.starts_with(p)));
    Ok(calls as f64 / MESSAGES as f64)
}

/// Coordination round trips per message on the uncontended path: the store is in memory, so
/// every script call is coordination.
async fn roundtrips(url: &str) -> Res<f64> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let replica = coordinated(url, "rt", "a", store, echo(Bot::builder())).await?;
    round_trips_per_msg(url, replica, SCRIPT_CALLS).await
}

/// Redis round trips per message for one coordinated echo bot on a `RedisStore` (see
/// [`replica`]), with or without durability.
async fn store_round_trips(url: &str, durable: bool) -> Res<f64> {
    flush(url).await?;
    let builder = echo(Bot::builder());
    let builder = if durable { builder.durability(Durability::new()) } else { builder };
    let replica = replica(url, "w", "a", builder).await?;
    round_trips_per_msg(url, replica, &[SCRIPT_CALLS, PLAIN_CALLS].concat()).await
}

/// The median time, in µs, one durable message of one chat takes on an otherwise idle replica
/// made by its store (see [`replica`]): from its arrival until the bot is idle again, its
/// reply sent and its turn given back. Messages go one at a time, so nothing batches: every
/// round trip of the message's path is waited for.
async fn durable_idle_p50_us(url: &str) -> Res<f64> {
    flush(url).await?;
    let builder = echo(Bot::builder()).durability(Durability::new());
    let (bot, provider) = replica(url, "idle", "a", builder).await?;
    let p50 = lone_message_p50_us(&bot, &provider).await;
    bot.stop().await?;
    Ok(p50)
}

/// The lock a naive bot takes around each message: `SET NX PX`, polled every 5 ms.
async fn naive_lock(
    conn: &mut redis::aio::MultiplexedConnection,
    lock: &str,
    token: &str,
) -> redis::RedisResult<()> {
    loop {
        let got: Option<String> = redis::cmd("SET")
            .arg(lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(15_000)
            .query_async(conn)
            .await?;
        if got.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One chat whose messages alternate between two bots, coordinated or serialized by the naive
/// lock; the gaps between one bot's handler returning and the other's starting, in
/// microseconds, sorted.
async fn handoffs(url: &str, naive: bool) -> Res<Vec<f64>> {
    const MESSAGES: usize = 2_000;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log: Arc<Mutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
    let mut replicas = Vec::new();
    for (i, id) in ["a", "b"].into_iter().enumerate() {
        let log = Arc::clone(&log);
        let conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        let builder = Bot::builder().on_message(move |ctx| {
            let log = Arc::clone(&log);
            let mut conn = conn.clone();
            async move {
                let lock = format!("naive:{}", ctx.key());
                if naive {
                    naive_lock(&mut conn, &lock, id).await?;
                }
                let start = Instant::now();
                ctx.reply("ok").await?;
                log.lock().map_err(|_| "poisoned")?.push((i, start, Instant::now()));
                if naive {
                    redis::cmd("DEL").arg(&lock).query_async::<()>(&mut conn).await?;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }
        });
        if naive {
            let provider = TestProvider::new();
            let bot = builder.provider(provider.clone()).store(Arc::clone(&store)).build()?;
            bot.start().await?;
            replicas.push((bot, provider));
        } else {
            replicas.push(coordinated(url, "ho", id, Arc::clone(&store), builder).await?);
        }
    }
    // Everything is queued up front, so every switch between bots is a real hand-off: the
    // next message's bot was already waiting when the previous one finished.
    for m in 0..MESSAGES {
        replicas[m % 2].1.say("contended", "x");
    }
    for (bot, provider) in &replicas {
        provider.settled(bot).await;
    }
    for (bot, _) in &replicas {
        bot.stop().await?;
    }
    let mut log = log.lock().map_err(|_| "poisoned")?.clone();
    log.sort_by_key(|e| e.1);
    let mut gaps: Vec<f64> = log
        .windows(2)
        .filter(|w| w[0].0 != w[1].0)
        .map(|w| w[1].1.saturating_duration_since(w[0].2).as_secs_f64() * 1e6)
        .collect();
    gaps.sort_by(f64::total_cmp);
    if gaps.is_empty() {
        return Err("no hand-offs between replicas were observed".into());
    }
    Ok(gaps)
}

/// Three bots without coordination that serialize each chat with a polled `SET NX PX` lock.
async fn naive(url: &str, store: Arc<dyn Store>) -> Res<f64> {
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        let provider = TestProvider::new();
        let bot = Bot::builder()
            .provider(provider.clone())
            .store(Arc::clone(&store))
            .on_message(move |ctx| {
                let mut conn = conn.clone();
                async move {
                    let lock = format!("naive:{}", ctx.key());
                    let token = format!("{:p}", &ctx);
                    naive_lock(&mut conn, &lock, &token).await?;
                    ctx.reply(ctx.body().to_owned()).await?;
                    redis::cmd("DEL").arg(&lock).query_async::<()>(&mut conn).await?;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
                }
            })
            .build()?;
        bot.start().await?;
        replicas.push((bot, provider));
    }
    spread(&replicas).await
}

pub(crate) async fn run() -> Res<Figures> {
    let server = RedisServer::start()?;
    let url = server.url();

    let per_msg = roundtrips(&url).await?;
    flush(&url).await?;
    let allocations = allocs_per_msg(&url, false).await?;
    flush(&url).await?;
    let durable_allocations = allocs_per_msg(&url, true).await?;
    flush(&url).await?;
    let watched = waits::polls_while_waiting(&url).await?;
    flush(&url).await?;
    let w3 = waits::ordered_arrivals(waits::Mesh::Redis(&url)).await?;
    let w3_hub = waits::ordered_arrivals(waits::Mesh::Hub).await?;
    let w3_floor = waits::floor().await?;
    flush(&url).await?;
    let gaps = handoffs(&url, false).await?;
    flush(&url).await?;
    let naive_gaps = handoffs(&url, true).await?;

    flush(&url).await?;
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&url, "load").await?);
    let mut three = Vec::new();
    for id in ["a", "b", "c"] {
        three.push(coordinated(&url, "load", id, Arc::clone(&store), echo(Bot::builder())).await?);
    }
    let replicas3 = load_run(&url, &three).await?;

    flush(&url).await?;
    let mut three = Vec::new();
    for id in ["a", "b", "c"] {
        let builder = echo(Bot::builder()).durability(Durability::new());
        three.push(replica(&url, "load", id, builder).await?);
    }
    let durable = load_run(&url, &three).await.map_err(|e| format!("the durable run: {e}"))?;
    let idle_p50 = durable_idle_p50_us(&url).await?;
    let extra_writes =
        store_round_trips(&url, true).await? - store_round_trips(&url, false).await?;

    flush(&url).await?;
    let uncoordinated = {
        let provider = TestProvider::new();
        let bot =
            echo(Bot::builder()).provider(provider.clone()).store(Arc::clone(&store)).build()?;
        bot.start().await?;
        spread(&[(bot, provider)]).await?
    };

    flush(&url).await?;
    let naive = naive(&url, Arc::clone(&store)).await?;

    flush(&url).await?;
    // Last, three replicas with the Prometheus exporter off and on, alternating (see
    // `metered.rs`), so the figures above are taken as before.
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for round in 0..6 {
        let metrics = round % 2 == 1;
        metered::exporter(metrics)?;
        flush(&url).await?;
        let mut three = Vec::new();
        for id in ["a", "b", "c"] {
            let bot = echo(Bot::builder());
            three.push(coordinated(&url, "load", id, Arc::clone(&store), bot).await?);
        }
        let rate = spread(&three).await?;
        if metrics { on.push(rate) } else { off.push(rate) }
    }
    metered::exporter(false)?;
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_some() {
        eprintln!(
            "replicas3 runs, exporter off: {off:.0?}\nreplicas3 runs, exporter on:  {on:.0?}"
        );
    }
    let (metrics_off, metrics_on) = (metered::median(off), metered::median(on));
    let mut figures = vec![
        ("coord_roundtrips_per_msg", per_msg, "commands/msg"),
        ("redis_cmds_per_msg", replicas3.cmds_per_msg, "commands/msg"),
        ("polls_while_waiting", watched.polls as f64, "commands"),
        ("heartbeat_cmds_while_waiting", watched.heartbeats as f64, "commands"),
        ("allocs_per_msg", allocations, "allocations/msg"),
        ("durable_allocs_per_msg", durable_allocations, "allocations/msg"),
        ("handoff_p50_us", percentile(&gaps, 0.50), "us"),
        ("handoff_p99_us", percentile(&gaps, 0.99), "us"),
        ("naive_handoff_p50_us", percentile(&naive_gaps, 0.50), "us"),
        ("naive_handoff_p99_us", percentile(&naive_gaps, 0.99), "us"),
        ("replicas3_msgs_per_s", replicas3.msgs_per_s, "msg/s"),
        ("redis_cpu_us_per_msg", replicas3.redis_cpu_us_per_msg, "us/msg"),
        ("process_cpu_us_per_msg", replicas3.process_cpu_us_per_msg, "us/msg"),
        ("replicas3_metrics_off_msgs_per_s", metrics_off, "msg/s"),
        ("replicas3_metrics_msgs_per_s", metrics_on, "msg/s"),
        ("redis_metrics_cost_pct", (1.0 - metrics_on / metrics_off) * 100.0, "%"),
        ("uncoordinated_msgs_per_s", uncoordinated, "msg/s"),
        ("naive_lock_msgs_per_s", naive, "msg/s"),
        ("replicas3_vs_naive_ratio", replicas3.msgs_per_s / naive, "x"),
        ("durable_extra_writes_per_msg", extra_writes, "commands/msg"),
        ("durable_idle_p50_us", idle_p50, "us"),
        ("durable_msgs_per_s", durable.msgs_per_s, "msg/s"),
        ("durable_vs_replicas3_ratio", durable.msgs_per_s / replicas3.msgs_per_s, "x"),
        ("durable_redis_cmds_per_msg", durable.cmds_per_msg, "commands/msg"),
        ("durable_redis_cpu_us_per_msg", durable.redis_cpu_us_per_msg, "us/msg"),
        ("durable_process_cpu_us_per_msg", durable.process_cpu_us_per_msg, "us/msg"),
    ];
    figures.extend(waits::w3_figures(&w3));
    figures.extend(waits::w3_hub_figures(&w3_hub));
    figures.extend(waits::w3_floor_figures(&w3_floor));
    drop(server);
    figures.extend(replicated::run().await?);
    Ok(figures)
}

/// With `BOTMESH_BENCH_VERBOSE` set, prints what Redis executed since the last reset (every
/// command's calls and time) and the CPU it used.
pub(crate) async fn show_stats(url: &str) -> Res<()> {
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_none() {
        return Ok(());
    }
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    eprintln!("{stats}\n{cpu}");
    Ok(())
}

/// The `load` suite: `replicas3_msgs_per_s` and `durable_msgs_per_s` with what Redis executed
/// and spent per message in each, and the allocations per message with and without
/// durability, to profile or to compare quickly.
pub(crate) async fn load() -> Res<Figures> {
    let server = RedisServer::start()?;
    let url = server.url();
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&url, "load").await?);
    let mut figures = Vec::new();
    let runs = [
        (
            false,
            [
                "replicas3_msgs_per_s",
                "redis_cmds_per_msg",
                "redis_cpu_us_per_msg",
                "process_cpu_us_per_msg",
            ],
        ),
        (
            true,
            [
                "durable_msgs_per_s",
                "durable_redis_cmds_per_msg",
                "durable_redis_cpu_us_per_msg",
                "durable_process_cpu_us_per_msg",
            ],
        ),
    ];
    for (durable, [rate, cmds, cpu, own]) in runs {
        flush(&url).await?;
        let mut three = Vec::new();
        for id in ["a", "b", "c"] {
            let replica = if durable {
                replica(&url, "load", id, echo(Bot::builder()).durability(Durability::new()))
                    .await?
            } else {
                coordinated(&url, "load", id, Arc::clone(&store), echo(Bot::builder())).await?
            };
            three.push(replica);
        }
        let load = load_run(&url, &three).await?;
        figures.push((rate, load.msgs_per_s, "msg/s"));
        figures.push((cmds, load.cmds_per_msg, "commands/msg"));
        figures.push((cpu, load.redis_cpu_us_per_msg, "us/msg"));
        figures.push((own, load.process_cpu_us_per_msg, "us/msg"));
    }
    for (name, durable) in [("allocs_per_msg", false), ("durable_allocs_per_msg", true)] {
        flush(&url).await?;
        figures.push((name, allocs_per_msg(&url, durable).await?, "allocations/msg"));
    }
    Ok(figures)
}
