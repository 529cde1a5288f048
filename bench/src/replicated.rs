//! The `redis` suite on a replicated Redis: what waiting for replicas costs, and what the
//! Sentinel connection costs, each against the plain figure of the same run.
//!
//! - `replicated_replicas3_msgs_per_s`: the `replicas3_msgs_per_s` load (three coordinated
//!   replicas sharing one `RedisStore`, 1,000 chats × 100 messages) on a private master with
//!   one replica, connected to the master directly.
//! - `wait_replicas3_msgs_per_s`: the same with `wait_for_replicas(1, 1 s)`: every take,
//!   release and heartbeat waits until the replica acknowledged it.
//! - `wait_cost_us_per_msg`: what waiting adds per message at that load, in wall time:
//!   1/`wait_replicas3_msgs_per_s` − 1/`replicated_replicas3_msgs_per_s`.
//! - `replicated_idle_p50_us`, `wait_idle_p50_us`: the median time one message takes alone on
//!   one coordinated replica (its take and its release, nothing batched), without and with
//!   waiting: the latency a quiet chat sees.
//! - `sentinel_replicas3_msgs_per_s`: the load through Sentinel (`RedisSentinels`: a master,
//!   its replica and three sentinels), without waiting.
//!
//! The three load figures are the medians of five runs each, alternating, so that a slow
//! moment of the machine does not fall on one side only. Replica and master share the
//! machine's two cores with the bench: the replica's acknowledgement is a loopback round
//! trip, the least a deployment pays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, MemoryStore};
use botmesh_redis_store::{RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::{RedisSentinels, RedisServer, TestProvider};

use crate::common::{Res, lone_message_p50_us, spread};
use crate::{Figures, metered};

/// How long a grant waits for the replica, at most: far above a loopback acknowledgement.
const WAIT: Duration = Duration::from_secs(1);

/// A master and its replica, in sync.
async fn master_and_replica() -> Res<(RedisServer, RedisServer)> {
    let master = RedisServer::start()?;
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !replica.cli(&["INFO", "replication"])?.contains("master_link_status:up") {
        if Instant::now() > deadline {
            return Err("the replica does not sync".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((master, replica))
}

async fn flush(master: &RedisServer) -> Res<()> {
    master.cli(&["FLUSHALL"])?;
    Ok(())
}

/// An echo replica on `options`, with `store`.
async fn echo_replica(
    options: &RedisOptions,
    id: &str,
    store: Arc<dyn Store>,
) -> Res<(Bot, TestProvider)> {
    let provider = TestProvider::new();
    let coordinator = RedisCoordinator::connect(options.clone()).await?.with_replica_id(id);
    let bot = Bot::builder()
        .on_message(|ctx| async move {
            ctx.reply(ctx.body().to_owned()).await?;
            Ok::<_, BotError>(())
        })
        .provider(provider.clone())
        .store(store)
        .coordination(CoordinationConfig::new(coordinator).build())
        .build()?;
    bot.start().await?;
    Ok((bot, provider))
}

/// The `replicas3_msgs_per_s` load on `options`.
async fn replicas3(options: &RedisOptions) -> Res<f64> {
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(options.clone()).await?);
    let mut three = Vec::new();
    for id in ["a", "b", "c"] {
        three.push(echo_replica(options, id, Arc::clone(&store)).await?);
    }
    spread(&three).await
}

/// The median time, in µs, one message takes alone on one coordinated replica (the store in
/// memory): from its arrival until the bot is idle again, its turn given back.
async fn idle_p50_us(options: &RedisOptions) -> Res<f64> {
    let (bot, provider) = echo_replica(options, "a", Arc::new(MemoryStore::new())).await?;
    let p50 = lone_message_p50_us(&bot, &provider).await;
    bot.stop().await?;
    Ok(p50)
}

pub(crate) async fn run() -> Res<Figures> {
    const ROUNDS: usize = 5;
    let (master, _replica) = master_and_replica().await?;
    let sentinels = tokio::task::spawn_blocking(RedisSentinels::start).await??;
    let sentinel_master = sentinels.master_port()?;
    let plain = RedisOptions::new(&master.url(), "rep");
    let waiting = plain.clone().wait_for_replicas(1, WAIT);
    let through_sentinel = RedisOptions::new(&sentinels.url(), "rep");

    // Alternating, so that a slow moment of the machine does not fall on one side only.
    let (mut without, mut with, mut sentinel) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        flush(&master).await?;
        without.push(replicas3(&plain).await?);
        flush(&master).await?;
        with.push(replicas3(&waiting).await?);
        sentinels.cli(sentinel_master, &["FLUSHALL"])?;
        sentinel.push(replicas3(&through_sentinel).await?);
    }
    if std::env::var_os("BOTMESH_BENCH_VERBOSE").is_some() {
        eprintln!("replicated runs: {without:.0?}\nwaiting runs:    {with:.0?}");
        eprintln!("sentinel runs:   {sentinel:.0?}");
    }
    let (without, with) = (metered::median(without), metered::median(with));
    let sentinel = metered::median(sentinel);
    flush(&master).await?;
    let idle_plain = idle_p50_us(&plain).await?;
    flush(&master).await?;
    let idle_waiting = idle_p50_us(&waiting).await?;

    Ok(vec![
        ("replicated_replicas3_msgs_per_s", without, "msg/s"),
        ("wait_replicas3_msgs_per_s", with, "msg/s"),
        ("wait_cost_us_per_msg", (1.0 / with - 1.0 / without) * 1e6, "us/msg"),
        ("replicated_idle_p50_us", idle_plain, "us"),
        ("wait_idle_p50_us", idle_waiting, "us"),
        ("sentinel_replicas3_msgs_per_s", sentinel, "msg/s"),
    ])
}
