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
    now_ns, parse_message_id,
};
use botmesh_coord::{CoordinationConfig, ProviderSession};
use botmesh_core::traits::{
    Capabilities, InboundStream, Intake, Provider, ProviderEvent, Store, async_trait,
};
use botmesh_core::traits::{
    CasOutcome, CasStore, ChatId, ChatKey, ChatRecord, CheckpointRecord, CheckpointWrite,
    Coordinator, FencedLock, InboxAppend, InboxRecord, JournalStore, JournaledTicket, Leadership,
    LeaseGrant, LeaseStore, LockStore, ReleaseOptions, TaskStore, Ticket, TurnGrant, TurnJournal,
};
use botmesh_core::{
    Bot, BotError, ConvCtx, Ctx, Durability, Error, Event, Flow, Inbound, Outbound, SendReceipt,
    Step, TransportStatus, Trigger,
};
use botmesh_redis_store::{RedisCoordinator, RedisOptions, RedisStore};
use botmesh_traits::webhook::IntakeSlot;
use futures_util::StreamExt;

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

/// The real store, with every checkpoint write that lands written down in the history.
struct Recorded {
    inner: Arc<RedisStore>,
    history: Arc<History>,
    replica: String,
}

impl Recorded {
    fn landed(&self, key: &str, revision: u64, t: u64) {
        if let Some(chat) = chat_of_key(key) {
            self.history.write(&Record::Checkpoint {
                chat,
                replica: self.replica.clone(),
                revision,
                t,
            });
        }
    }
}

#[async_trait]
impl Store for Recorded {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn cas(&self) -> Option<&dyn CasStore> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn LockStore> {
        Some(self)
    }

    fn leases(&self) -> Option<&dyn LeaseStore> {
        Some(self)
    }

    fn tasks(&self) -> Option<&dyn TaskStore> {
        Some(self)
    }

    fn journal(&self) -> Option<&dyn JournalStore> {
        Some(self)
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> botmesh_core::traits::Result<()> {
        self.inner.upsert_chat(chat).await
    }

    async fn get_chat(&self, id: &ChatId) -> botmesh_core::traits::Result<Option<ChatRecord>> {
        self.inner.get_chat(id).await
    }

    async fn get_user_data(&self, key: &str) -> botmesh_core::traits::Result<Option<String>> {
        self.inner.get_user_data(key).await
    }

    async fn set_user_data(&self, key: &str, data: &str) -> botmesh_core::traits::Result<()> {
        self.inner.set_user_data(key, data).await
    }

    async fn get_checkpoint(
        &self,
        key: &str,
    ) -> botmesh_core::traits::Result<Option<CheckpointRecord>> {
        self.inner.get_checkpoint(key).await
    }

    async fn set_checkpoint(
        &self,
        key: &str,
        write: &CheckpointWrite,
    ) -> botmesh_core::traits::Result<u64> {
        self.inner.set_checkpoint(key, write).await
    }

    async fn clear_checkpoint(&self, key: &str) -> botmesh_core::traits::Result<()> {
        self.inner.clear_checkpoint(key).await
    }
}

#[async_trait]
impl CasStore for Recorded {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> botmesh_core::traits::Result<CasOutcome> {
        let t = now_ns();
        let outcome = self.inner.set_checkpoint_if(key, write, expected).await?;
        if let CasOutcome::Written { revision } = outcome {
            self.landed(key, revision, t);
        }
        Ok(outcome)
    }

    async fn clear_checkpoint_if(
        &self,
        key: &str,
        expected: u64,
    ) -> botmesh_core::traits::Result<bool> {
        let t = now_ns();
        let cleared = self.inner.clear_checkpoint_if(key, expected).await?;
        if cleared {
            self.landed(key, 0, t);
        }
        Ok(cleared)
    }
}

#[async_trait]
impl LockStore for Recorded {
    async fn acquire_lock_fenced(
        &self,
        key: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<Option<FencedLock>> {
        self.inner.acquire_lock_fenced(key, ttl).await
    }

    async fn renew_lock(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.renew_lock(key, token, ttl).await
    }

    async fn release_lock(&self, key: &str, token: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.release_lock(key, token).await
    }
}

#[async_trait]
impl LeaseStore for Recorded {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<Option<LeaseGrant>> {
        self.inner.acquire_lease(name, holder, ttl).await
    }

    async fn renew_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.renew_lease(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.release_lease(name, holder).await
    }
}

#[async_trait]
impl TaskStore for Recorded {
    async fn task_last(&self, id: &str) -> botmesh_core::traits::Result<Option<u64>> {
        self.inner.task_last(id).await
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> botmesh_core::traits::Result<bool> {
        self.inner.task_claim(id, occurrence).await
    }
}

#[async_trait]
impl JournalStore for Recorded {
    fn place(&self) -> Option<&str> {
        self.inner.place()
    }

    async fn inbox_append(
        &self,
        record: &InboxRecord,
        retain: Duration,
    ) -> botmesh_core::traits::Result<InboxAppend> {
        self.inner.inbox_append(record, retain).await
    }

    async fn inbox_ack(&self, id: &str) -> botmesh_core::traits::Result<()> {
        self.inner.inbox_ack(id).await
    }

    async fn inbox_get(&self, id: &str) -> botmesh_core::traits::Result<Option<InboxRecord>> {
        self.inner.inbox_get(id).await
    }

    async fn inbox_pending(&self, limit: usize) -> botmesh_core::traits::Result<Vec<InboxRecord>> {
        self.inner.inbox_pending(limit).await
    }

    async fn inbox_pending_for(
        &self,
        key: &ChatKey,
        limit: usize,
    ) -> botmesh_core::traits::Result<Vec<InboxRecord>> {
        self.inner.inbox_pending_for(key, limit).await
    }

    async fn inbox_claim(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.inbox_claim(id, from, to).await
    }

    async fn outbox_claim(&self, key: &str, ttl: Duration) -> botmesh_core::traits::Result<bool> {
        self.inner.outbox_claim(key, ttl).await
    }

    async fn outbox_release(&self, key: &str) -> botmesh_core::traits::Result<()> {
        self.inner.outbox_release(key).await
    }
}

/// The real coordinator's journal, its grants and releases written down as the coordinator's.
#[async_trait]
impl TurnJournal for Granted {
    fn place(&self) -> &str {
        self.inner.turn_journal().map_or("", TurnJournal::place)
    }
    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> botmesh_core::traits::Result<Vec<JournaledTicket>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: "journal" })?;
        let answers = journal.take_tickets_journaling(key, records, retain).await?;
        for answer in &answers {
            if let JournaledTicket::Appended(Ticket { grant: Some(grant), .. }) = answer {
                self.granted(grant);
            }
        }
        Ok(answers)
    }
    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> botmesh_core::traits::Result<Option<bool>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: "journal" })?;
        // Written before the call, as any release is: the next grant may come before its
        // answer. One that does nothing (`None`) is released again, and written again.
        self.released(grant, options);
        journal.release_turn_acknowledging(grant, options, id).await
    }
}

/// The real coordinator, with every turn it is granted written down in the history.
struct Granted {
    inner: RedisCoordinator,
    history: Arc<History>,
    replica: String,
}

impl Granted {
    fn granted(&self, grant: &TurnGrant) {
        if let Some(chat) = chat_of_key(grant.key.as_str()) {
            self.history.write(&Record::Grant {
                chat,
                replica: self.replica.clone(),
                fence: grant.fence,
                passed: grant.passed_over.clone(),
                t: now_ns(),
            });
        }
    }

    fn released(&self, grant: &TurnGrant, options: &ReleaseOptions) {
        if let Some(chat) = chat_of_key(grant.key.as_str()) {
            self.history.write(&Record::Released {
                chat,
                replica: self.replica.clone(),
                fence: grant.fence,
                used: options.used,
                hand_back: options.hand_back,
                t: now_ns(),
            });
        }
    }
}

#[async_trait]
impl Coordinator for Granted {
    fn replica_id(&self) -> &str {
        self.inner.replica_id()
    }
    fn incarnation(&self) -> &str {
        self.inner.incarnation()
    }
    fn lease(&self) -> Duration {
        self.inner.lease()
    }
    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        self.inner.turn_journal().map(|_| self as &dyn TurnJournal)
    }
    async fn take_ticket(&self, key: &ChatKey) -> botmesh_core::traits::Result<Ticket> {
        let ticket = self.inner.take_ticket(key).await?;
        if let Some(grant) = &ticket.grant {
            self.granted(grant);
        }
        Ok(ticket)
    }
    async fn take_tickets(
        &self,
        key: &ChatKey,
        count: usize,
    ) -> botmesh_core::traits::Result<Vec<Ticket>> {
        let tickets = self.inner.take_tickets(key, count).await?;
        for grant in tickets.iter().filter_map(|t| t.grant.as_ref()) {
            self.granted(grant);
        }
        Ok(tickets)
    }
    async fn wait_turn(
        &self,
        ticket: &Ticket,
        timeout: Duration,
    ) -> botmesh_core::traits::Result<TurnGrant> {
        let grant = self.inner.wait_turn(ticket, timeout).await?;
        if ticket.grant.is_none() {
            self.granted(&grant);
        }
        Ok(grant)
    }
    async fn release_turn(&self, grant: &TurnGrant) -> botmesh_core::traits::Result<bool> {
        self.released(grant, &ReleaseOptions::used());
        self.inner.release_turn(grant).await
    }
    async fn release_turn_with(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
    ) -> botmesh_core::traits::Result<bool> {
        self.released(grant, options);
        self.inner.release_turn_with(grant, options).await
    }
    async fn cancel_ticket(&self, ticket: &Ticket) -> botmesh_core::traits::Result<()> {
        self.inner.cancel_ticket(ticket).await
    }
    async fn is_alive(&self, incarnation: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.is_alive(incarnation).await
    }
    async fn heartbeat(&self, lease: Duration) -> botmesh_core::traits::Result<()> {
        self.inner.heartbeat(lease).await
    }
    async fn try_lead(
        &self,
        name: &str,
        lease: Duration,
    ) -> botmesh_core::traits::Result<Option<Leadership>> {
        self.inner.try_lead(name, lease).await
    }
    async fn resign(&self, leadership: &Leadership) -> botmesh_core::traits::Result<bool> {
        self.inner.resign(leadership).await
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
        let (Some(chat), Some(reply)) = (chat.strip_prefix('c'), Reply::parse(text)) else {
            return;
        };
        let Ok(chat) = chat.parse() else { return };
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
