//! One replica of the chaos bot, run as its own process by `botmesh-chaos`.
//!
//! It keeps its state in a `RedisStore` and coordinates through a `RedisCoordinator` on the
//! run's private Redis, and runs one transport or both (`--transport`):
//! - `shared`: a webhook endpoint on a loopback port, which every replica serves
//!   (`webhook.rs`);
//! - `exclusive`: a long-polling session on the harness's platform, held by the elected replica
//!   only (`poller.rs`);
//! - `both`: the two at once, each elected on its own.
//!
//! Replies go to the harness's platform API (`platform.rs`). The bot has a persistent
//! two-question flow (`form`) and a free-form echo; every message it takes, every poll, every
//! grant and every checkpoint write that lands is appended to the replica's history file
//! (`log.rs`, `recording.rs`).
//!
//! ```text
//! chaos-replica --id r1 --redis redis://127.0.0.1:PORT/ --port 8001 \
//!     --platform http://127.0.0.1:8000 --history r1.jsonl --lease-ms 2000 --durability on \
//!     --transport both
//! ```
//!
//! `--redis` may be a `redis+sentinel://` URL; `--wait-replicas on` makes every grant wait for
//! the master's replica. `--id` defaults to the `HOSTNAME` variable (a container's name),
//! `--history` to none, `--bind` to `127.0.0.1`, `--lease-ms` to 15000, `--durability` to
//! `on`, `--transport` to `shared` and `--wait-replicas` to `off`; this is how
//! `examples/compose` runs it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::routing::post;
use botmesh_chaos::record::{History, Record, Reply, now_ns, parse_message_id};
use botmesh_coord::CoordinationConfig;
use botmesh_core::{Bot, BotError, ConvCtx, Ctx, Durability, Flow, Step, Trigger};
use botmesh_redis_store::{RedisOptions, RedisStore};
use botmesh_traits::webhook::IntakeSlot;

mod log;
mod platform;
mod poller;
mod recording;
mod webhook;

use log::Log;
use platform::Platform;
use poller::Poller;
use recording::{Granted, Recorded};
use webhook::Webhook;

/// The key prefix every replica of a run shares.
const PREFIX: &str = "chaos";

struct Args {
    id: String,
    redis: String,
    bind: String,
    port: u16,
    platform: String,
    history: Option<PathBuf>,
    lease: Duration,
    durability: bool,
    /// Whether it serves the webhook (shared) transport.
    shared: bool,
    /// Whether it runs the polling (exclusive) transport.
    exclusive: bool,
    /// Whether every grant waits for Redis's replica to have it.
    wait_replicas: bool,
}

fn args() -> Result<Args> {
    let mut map = std::collections::HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let name = flag.strip_prefix("--").with_context(|| format!("unexpected {flag}"))?;
        let value = it.next().with_context(|| format!("--{name} needs a value"))?;
        map.insert(name.to_owned(), value);
    }
    let get = |k: &str| map.get(k).cloned().with_context(|| format!("--{k} is required"));
    let or = |k: &str, default: &str| map.get(k).cloned().unwrap_or_else(|| default.to_owned());
    let id = match map.get("id") {
        Some(id) => id.clone(),
        None => std::env::var("HOSTNAME").context("--id is required without HOSTNAME")?,
    };
    Ok(Args {
        id,
        redis: get("redis")?,
        bind: or("bind", "127.0.0.1"),
        port: get("port")?.parse().context("--port")?,
        platform: get("platform")?,
        history: map.get("history").map(PathBuf::from),
        lease: Duration::from_millis(or("lease-ms", "15000").parse().context("--lease-ms")?),
        durability: match or("durability", "on").as_str() {
            "on" => true,
            "off" => false,
            other => bail!("--durability is on or off, not {other}"),
        },
        wait_replicas: match or("wait-replicas", "off").as_str() {
            "on" => true,
            "off" => false,
            other => bail!("--wait-replicas is on or off, not {other}"),
        },
        shared: matches!(or("transport", "shared").as_str(), "shared" | "both"),
        exclusive: match or("transport", "shared").as_str() {
            "shared" => false,
            "exclusive" | "both" => true,
            other => bail!("--transport is shared, exclusive or both, not {other}"),
        },
    })
}

/// A little work before answering, so that turns last long enough to overlap if the
/// coordination let them.
async fn work() {
    let ms = rand::random_range(0..30);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn reply(seq: u32, kind: &str, fence: Option<u64>) -> String {
    Reply { seq, kind: kind.to_owned(), fence: fence.unwrap_or(0) }.text()
}

/// The persistent flow: `form`, then two questions. Every message it takes gets one reply.
fn form(log: &Log) -> Flow {
    let (first, second) = (log.clone(), log.clone());
    Flow::new("form")
        .trigger(Trigger::keyword("form"))
        .persistent()
        .do_step("first", move |c: ConvCtx| {
            let log = first.clone();
            async move {
                let start = c.message();
                // Resumed on an answer (the flow moved here while parked on its question), the
                // step runs again with that answer as its message: the trigger was taken
                // before, elsewhere.
                let resumed = !start.body.eq_ignore_ascii_case("form");
                let Some((_, seq)) = parse_message_id(start.id().as_str()) else {
                    return Ok(Step::End);
                };
                if resumed || log.handled(start.id().as_str(), "form", c.fence()).is_some() {
                    work().await;
                    let answer = c.ask(reply(seq, "q1", c.fence())).await?;
                    log.handled(answer.id().as_str(), "a1", c.fence());
                }
                Ok::<_, BotError>(Step::Next)
            }
        })
        .do_step("second", move |c: ConvCtx| {
            let log = second.clone();
            async move {
                let Some((_, seq)) = parse_message_id(c.message().id().as_str()) else {
                    return Ok(Step::End);
                };
                work().await;
                let answer = c.ask(reply(seq, "q2", c.fence())).await?;
                if let Some(seq) = log.handled(answer.id().as_str(), "a2", c.fence()) {
                    work().await;
                    c.send(reply(seq, "done", c.fence())).await?;
                }
                Ok::<_, BotError>(Step::Next)
            }
        })
}

async fn echo(log: Log, ctx: Ctx) -> Result<(), BotError> {
    if let Some(seq) = log.handled(ctx.message().id().as_str(), "echo", ctx.fence()) {
        work().await;
        ctx.reply(reply(seq, "echo", ctx.fence())).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = args()?;
    let history = Arc::new(match &args.history {
        Some(path) => History::open(path).context("opening the history")?,
        None => History::discard(),
    });
    history.write(&Record::Started { replica: args.id.clone(), t: now_ns() });
    let log = Log { history: Arc::clone(&history), replica: args.id.clone() };

    // Replies must fail well within a third of the lease, for a stall to be noticed in time.
    let timeout = args.lease / 8;
    let options = || {
        let options = RedisOptions::new(&args.redis, PREFIX)
            .response_timeout(timeout)
            .connection_timeout(timeout);
        // Half the response timeout, which the WAIT rides in.
        match args.wait_replicas {
            true => options.wait_for_replicas(1, timeout / 2),
            false => options,
        }
    };
    let redis = RedisStore::connect(options()).await.context("connecting the store")?;
    // Made by the store: it journals messages with their tickets, and acknowledges them with
    // their releases.
    let coordinator = redis.coordinator(args.lease).with_replica_id(&args.id);
    let store = Recorded {
        inner: Arc::new(redis),
        history: Arc::clone(&history),
        replica: args.id.clone(),
    };
    let coordinator = Granted { inner: coordinator, history, replica: args.id.clone() };
    // Each transport as its capabilities say: the webhook on every replica, the poller on the
    // one elected for it.
    let coordination = CoordinationConfig::new(coordinator).build();
    let platform = Platform {
        url: args.platform.clone(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?,
        log: log.clone(),
    };
    let slot = IntakeSlot::new();
    let (echo_log, note_log) = (log.clone(), log.clone());
    let mut builder = Bot::builder()
        .on(move |event| note_log.note(event))
        .store(Arc::new(store))
        .coordination(coordination)
        .flow(form(&log))
        .on_message(move |ctx| echo(echo_log.clone(), ctx));
    if args.shared {
        builder = builder.provider(Webhook { platform: platform.clone(), slot: slot.clone() });
    }
    if args.exclusive {
        builder = builder.provider(Poller::new(platform, args.lease));
    }
    if args.durability {
        builder = builder.durability(Durability::new().replay_every(args.lease / 8));
    }
    let bot = builder.build().context("building the bot")?;
    bot.start().await.context("starting the bot")?;

    // Served with either transport: the harness waits for the port to know the replica is up.
    let app = Router::new().route("/webhook", post(webhook::webhook)).with_state((slot, log));
    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .with_context(|| format!("binding port {}", args.port))?;
    let serve = axum::serve(listener, app).with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    serve.await.context("serving the webhook")?;
    bot.stop().await.context("stopping the bot")?;
    Ok(())
}
