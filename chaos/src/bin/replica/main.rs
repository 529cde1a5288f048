//! One replica of the chaos bot, run as its own process by `botmesh-chaos`.
//!
//! It serves a webhook endpoint on a loopback port (a shared session: every replica receives),
//! keeps its state in a `RedisStore` and coordinates through a `RedisCoordinator` on the run's
//! private `redis-server`, and sends its replies to the harness's fake platform API. The bot has
//! a persistent two-question flow (`form`) and a free-form echo; every message it takes and
//! every checkpoint write that lands is appended to the replica's history file.
//!
//! ```text
//! chaos-replica --id r1 --redis redis://127.0.0.1:PORT/ --port 8001 \
//!     --platform http://127.0.0.1:8000 --history r1.jsonl --lease-ms 2000 --durability on
//! ```
//!
//! `--id` defaults to the `HOSTNAME` variable (a container's name), `--history` to none,
//! `--bind` to `127.0.0.1`, `--lease-ms` to 15000 and `--durability` to `on`; this is how
//! `examples/compose` runs it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use botmesh_chaos::record::{
    Delivery, History, PROVIDER, PlatformSend, Record, Reply, chat_id, chat_of_key, message_id,
    now_ns, parse_chat_id, parse_message_id,
};
use botmesh_coord::{CoordinationConfig, ProviderSession};
use botmesh_core::traits::{
    Capabilities, InboundStream, Intake, Provider, ProviderEvent, async_trait,
};
use botmesh_core::{
    Bot, BotError, ConvCtx, Ctx, Durability, Error, Event, Flow, Inbound, Outbound, SendReceipt,
    Step, TransportStatus, Trigger,
};
use botmesh_redis_store::{RedisOptions, RedisStore};
use botmesh_traits::webhook::IntakeSlot;
use futures_util::StreamExt;

mod recording;

use recording::{Granted, Recorded};

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
    })
}

/// The webhook transport: messages arrive on the HTTP endpoint and go through the bot's intake,
/// which says what to answer the sender; sends go to the platform API.
struct Webhook {
    replica: String,
    platform: String,
    client: reqwest::Client,
    slot: IntakeSlot,
    log: Log,
}

#[async_trait]
impl Provider for Webhook {
    fn id(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::shared()
    }

    async fn start(&self, intake: Intake) -> botmesh_core::traits::Result<InboundStream> {
        // Deliveries reach the bot through the intake; the stream only reports the status and
        // ends on stop.
        self.slot.open(intake);
        let open =
            futures_util::stream::once(async { ProviderEvent::Status(TransportStatus::Open) });
        let end = futures_util::stream::once(self.slot.closed()).filter_map(|()| async { None });
        Ok(Box::pin(open.chain(end)))
    }

    async fn stop(&self) -> botmesh_core::traits::Result<()> {
        self.slot.close();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> botmesh_core::traits::Result<SendReceipt> {
        let body = PlatformSend {
            replica: self.replica.clone(),
            chat: message.chat.as_str().to_owned(),
            text: message.text_body().unwrap_or_default().to_owned(),
        };
        let failed = |e: reqwest::Error| Error::Provider {
            provider: PROVIDER.to_owned(),
            op: "send",
            source: Box::new(e),
        };
        self.log.sending(&body.chat, &body.text);
        let mut request = self.client.post(format!("{}/send", self.platform)).json(&body);
        if let Some(key) = &message.idempotency_key {
            request = request.header("idempotency-key", key);
        }
        request.send().await.and_then(reqwest::Response::error_for_status).map_err(failed)?;
        Ok(SendReceipt::new(None))
    }

    fn status(&self) -> TransportStatus {
        TransportStatus::Open
    }
}

/// What the bot's handlers need to write their history.
#[derive(Clone)]
struct Log {
    history: Arc<History>,
    replica: String,
}

impl Log {
    /// Writes down what the bot reported about a chat, when it is worth reading afterwards.
    fn note(&self, event: &Event) {
        let key = match event {
            Event::TakenOver { key, .. }
            | Event::Duplicate { key, .. }
            | Event::LeaseLost { key, .. } => Some(key.to_string()),
            Event::SendSkipped { chat, .. } => Some(chat.to_string()),
            Event::Error { key, .. } => key.as_ref().map(ToString::to_string),
            _ => return,
        };
        let chat = key.as_deref().and_then(chat_of_key);
        self.history.write(&Record::Note {
            chat,
            replica: self.replica.clone(),
            text: format!("{event:?}"),
            t: now_ns(),
        });
    }

    /// Writes down that the reply with `text` to `chat` is handed to the HTTP client now.
    fn sending(&self, chat: &str, text: &str) {
        let (Some(chat), Some(reply)) = (parse_chat_id(chat), Reply::parse(text)) else {
            return;
        };
        self.history.write(&Record::Sending {
            chat,
            seq: reply.seq,
            kind: reply.kind,
            fence: reply.fence,
            replica: self.replica.clone(),
            t: now_ns(),
        });
    }

    /// Writes down that delivery `seq` of `chat` was taken, at `t`.
    fn accepted(&self, chat: u32, seq: u32, t: u64) {
        self.history.write(&Record::Accepted { chat, seq, replica: self.replica.clone(), t });
    }

    /// Writes down that message `id` was taken as `kind` under `fence`, and returns its number.
    fn handled(&self, id: &str, kind: &str, fence: Option<u64>) -> Option<u32> {
        let (chat, seq) = parse_message_id(id)?;
        self.history.write(&Record::Handled {
            chat,
            seq,
            kind: kind.to_owned(),
            replica: self.replica.clone(),
            fence: fence.unwrap_or(0),
            t: now_ns(),
        });
        Some(seq)
    }
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

async fn webhook(
    State((slot, log)): State<(IntakeSlot, Log)>,
    Json(d): Json<Delivery>,
) -> Response {
    let inbound = Inbound::text(PROVIDER, message_id(d.chat, d.seq), chat_id(d.chat), d.body);
    let verdict = slot.accept(inbound).await;
    if verdict.is_taken() {
        log.accepted(d.chat, d.seq, now_ns());
    } else {
        tracing::warn!(verdict = %verdict, "refused a delivery; the sender retries");
    }
    verdict.into_response()
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
        RedisOptions::new(&args.redis, PREFIX).response_timeout(timeout).connection_timeout(timeout)
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
    let coordination =
        CoordinationConfig::new(coordinator).provider_session(ProviderSession::Shared).build();
    let provider = Webhook {
        replica: args.id.clone(),
        platform: args.platform.clone(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?,
        slot: IntakeSlot::new(),
        log: log.clone(),
    };
    let slot = (provider.slot.clone(), log.clone());
    let (echo_log, note_log) = (log.clone(), log.clone());
    let mut builder = Bot::builder()
        .on(move |event| note_log.note(event))
        .provider(provider)
        .store(Arc::new(store))
        .coordination(coordination)
        .flow(form(&log))
        .on_message(move |ctx| echo(echo_log.clone(), ctx));
    if args.durability {
        builder = builder.durability(Durability::new().replay_every(args.lease / 8));
    }
    let bot = builder.build().context("building the bot")?;
    bot.start().await.context("starting the bot")?;

    let app = Router::new().route("/webhook", post(webhook)).with_state(slot);
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
