//! The bot: its builder, and start/stop.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use botmesh_traits::{
    BoxError, Inbound, Outbound, Provider, ProviderEvent, SendReceipt, Store, TransportStatus,
    async_trait,
};
use futures_util::StreamExt;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::coordination::{Coordination, Host};
use crate::dispatcher::{Accepted, Dispatcher};
use crate::event::{EventBus, Listener};
use crate::flow::Def;
use crate::repair::Repairs;
use crate::scheduler::{self, JobDef, JobFn, job_fn};
use crate::shared::{HandlerFn, HookFn, Shared};
use crate::{
    BotError, ConfigError, Conversation, Ctx, Durability, Event, Flow, Handover, JobCtx,
    MemoryStore, Message, Result, SchedulerLease, TaskOptions, Texts, Timing, Trigger, Warning,
};

/// Builds a [`Bot`].
///
/// Defaults: a [`MemoryStore`], English as the default language, duplicate ids remembered
/// for the last 10,000 messages, message bodies up to 256 KiB, and an event channel of 1,024
/// events per subscriber.
pub struct BotBuilder {
    provider: Option<Arc<dyn Provider>>,
    store: Option<Arc<dyn Store>>,
    texts: Texts,
    defs: Vec<Def>,
    handlers: Vec<HandlerFn>,
    hooks: Vec<HookFn>,
    cancels: Vec<Trigger>,
    listeners: Vec<Listener>,
    dedupe_capacity: usize,
    max_body_bytes: usize,
    event_capacity: usize,
    coordination: Option<Arc<dyn Coordination>>,
    jobs: Vec<JobDef>,
    scheduler_lease: Option<SchedulerLease>,
    handover: Handover,
    durability: Option<Durability>,
}

impl std::fmt::Debug for BotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotBuilder")
            .field("flows", &self.defs.iter().map(Def::name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for BotBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BotBuilder {
    /// A builder with the defaults above.
    pub fn new() -> Self {
        Self {
            provider: None,
            store: None,
            texts: Texts::default(),
            defs: Vec::new(),
            handlers: Vec::new(),
            hooks: Vec::new(),
            cancels: Vec::new(),
            listeners: Vec::new(),
            dedupe_capacity: 10_000,
            max_body_bytes: 256 * 1024,
            event_capacity: 1024,
            coordination: None,
            jobs: Vec::new(),
            scheduler_lease: None,
            handover: Handover::new(),
            durability: None,
        }
    }

    /// The transport. Required.
    pub fn provider(mut self, provider: impl Provider) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// The transport, already shared.
    pub fn provider_arc(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Where chats, user data and checkpoints live. Defaults to a [`MemoryStore`].
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adds a flow.
    pub fn flow(mut self, mut flow: Flow) -> Self {
        flow.fingerprint = flow.compute_fingerprint().into();
        self.defs.push(Def::Flow(Arc::new(flow)));
        self
    }

    /// Adds a free-form conversation.
    pub fn conversation(mut self, conversation: Conversation) -> Self {
        self.defs.push(Def::Conv(Arc::new(conversation)));
        self
    }

    /// Adds a handler for messages that no conversation took. Handlers run in the order they
    /// were added; an error or a panic in one is reported as [`Event::Error`] and the next
    /// still runs.
    pub fn on_message<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.handlers.push(Arc::new(move |ctx| {
            let fut = f(ctx);
            Box::pin(async move { fut.await.map_err(Into::into) })
        }));
        self
    }

    /// Adds a `before("message")` hook: it receives each message before anything else sees it
    /// and returns what the rest of the bot sees (a voice transcript as the body, say). An
    /// error stops the message there and is reported as [`Event::Error`].
    pub fn before_message<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Message, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.hooks.push(Arc::new(move |m| {
            let fut = f(m);
            Box::pin(async move { fut.await.map_err(Into::into) })
        }));
        self
    }

    /// Ends whatever conversation waits for an answer when the answer matches `trigger`, with
    /// [`EndReason::Cancelled`](crate::EndReason::Cancelled): its checkpoint (or hand-over stub)
    /// is cleared, its timers will not fire, and the user gets the localized
    /// `core.conversation.cancelled` text (an empty override sends nothing). The decision comes
    /// after the `before_message` hooks (a transcribed "cancel" cancels) and before the
    /// conversation sees the message (a question's validator never gets a cancel word). With no
    /// conversation waiting the message routes as usual.
    ///
    /// ```
    /// use botmesh_core::{Bot, Trigger, texts::keys};
    ///
    /// // `cancel`, `stop` and `/cancel`, or `cancelar` in Spanish: the words are a text.
    /// let builder = Bot::builder().cancel_on(Trigger::text(keys::CANCEL_WORDS));
    /// # let _ = builder;
    /// ```
    pub fn cancel_on(mut self, trigger: Trigger) -> Self {
        self.cancels.push(trigger);
        self
    }

    /// Calls `f` for every [`Event`], synchronously, on the task that emits it. Keep it short;
    /// for async work subscribe with [`Bot::events`].
    pub fn on(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(f));
        self
    }

    /// The language used when a message has none. Defaults to `en`.
    pub fn default_lang(mut self, lang: impl Into<String>) -> Self {
        let mut texts = Texts::new(lang);
        std::mem::swap(&mut texts, &mut self.texts);
        self
    }

    /// Overrides or adds a localized text (see [`texts::keys`](crate::texts::keys)).
    pub fn text(mut self, lang: &str, key: &str, text: &str) -> Self {
        self.texts.set(lang, key, text);
        self
    }

    /// How many message ids to remember for dropping duplicates. `0` turns dedupe off.
    pub fn dedupe_capacity(mut self, n: usize) -> Self {
        self.dedupe_capacity = n;
        self
    }

    /// The largest message text accepted; larger messages are refused with
    /// [`Error::InvalidInput`] and reported.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// Runs `job` every `interval` on this process. With several replicas, a plain job runs on
    /// every one of them; see [`every_with`](Self::every_with) for once per occurrence.
    pub fn every<F, Fut, E>(self, interval: Duration, job: F) -> Self
    where
        F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.schedule_inner(Timing::every(interval), None, job_fn(job))
    }

    /// Runs `job` every `interval`; with [`TaskOptions::durable`], each occurrence runs on
    /// exactly one replica.
    pub fn every_with<F, Fut, E>(self, interval: Duration, task: TaskOptions, job: F) -> Self
    where
        F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.schedule_inner(Timing::every(interval), Some(task), job_fn(job))
    }

    /// Runs `job` on a [`Timing`] (a cron expression, an instant) on this process.
    pub fn schedule<F, Fut, E>(self, timing: Timing, job: F) -> Self
    where
        F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.schedule_inner(timing, None, job_fn(job))
    }

    /// Runs `job` on a [`Timing`], each occurrence on exactly one replica.
    pub fn schedule_with<F, Fut, E>(self, timing: Timing, task: TaskOptions, job: F) -> Self
    where
        F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.schedule_inner(timing, Some(task), job_fn(job))
    }

    fn schedule_inner(mut self, timing: Timing, task: Option<TaskOptions>, f: JobFn) -> Self {
        self.jobs.push(JobDef { timing, task, f });
        self
    }

    /// Where the leadership of durable tasks comes from. Defaults to the coordinator when the
    /// bot is coordinated, else to the bot's store's leases.
    pub fn scheduler_lease(mut self, lease: SchedulerLease) -> Self {
        self.scheduler_lease = Some(lease);
        self
    }

    /// Runs the bot as one of several replicas under a coordination runtime (built by
    /// `botmesh-coord`). Without it the bot is a single process and no coordination code runs.
    pub fn coordination(mut self, coordination: Arc<dyn Coordination>) -> Self {
        self.coordination = Some(coordination);
        self
    }

    /// How live conversations are carried to the replica that takes their chat (or to this
    /// process restarted): see [`Handover`]. Default: only `.persistent()` flows continue.
    pub fn handover(mut self, handover: Handover) -> Self {
        self.handover = handover;
        self
    }

    /// Journals every inbound message in the store on arrival (dropping retries across
    /// replicas), replays what a dead replica journaled, and deduplicates the sends of a step
    /// that runs again: see [`Durability`]. The store must have the journal.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Builds the bot.
    pub fn build(self) -> Result<Bot, ConfigError> {
        let provider = self.provider.ok_or(ConfigError::MissingProvider)?;
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let mut defs = HashMap::new();
        let mut triggered = Vec::new();
        let (mut has_persistent, mut has_resumable) = (false, false);
        for def in self.defs {
            if let Def::Flow(f) = &def {
                if f.steps.is_empty() {
                    return Err(ConfigError::EmptyFlow { name: f.name.clone() });
                }
                has_persistent |= f.persistent;
            }
            has_resumable |= def.resumes();
            if !def.triggers().is_empty() {
                triggered.push(def.clone());
            }
            let name = def.name().to_owned();
            if defs.insert(name.clone(), def).is_some() {
                return Err(ConfigError::DuplicateName { name });
            }
        }
        let cas_checkpoints =
            self.coordination.is_some() && store.capabilities().atomic_checkpoints();
        if self.durability.is_some() && !store.capabilities().journal() {
            return Err(ConfigError::NoJournal);
        }
        let owner = self
            .coordination
            .as_ref()
            .and_then(|c| c.coordinator())
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), |c| c.incarnation().to_owned());
        let shared = Arc::new(Shared {
            provider,
            store,
            texts: self.texts,
            events: EventBus::new(self.listeners, self.event_capacity),
            defs,
            triggered,
            handlers: self.handlers,
            hooks: self.hooks,
            cancels: self.cancels,
            has_persistent,
            has_resumable,
            max_body_bytes: self.max_body_bytes,
            cas_checkpoints,
            coordination: self.coordination,
            transport_up: watch::channel(false).0,
            handover: self.handover,
            durability: self.durability,
            owner,
            repairs: Repairs::new(),
        });
        let mut task_ids = HashSet::new();
        let store_caps = shared.store.capabilities();
        for task in self.jobs.iter().filter_map(|j| j.task.as_ref()) {
            if !task_ids.insert(task.id.clone()) {
                return Err(ConfigError::DuplicateName { name: task.id.clone() });
            }
            if store_caps.shared() && !store_caps.atomic_checkpoints() {
                // Two replicas could both read the last occurrence and both claim the next.
                return Err(ConfigError::DurableTaskNeedsAtomicStore { task: task.id.clone() });
            }
        }
        let dispatcher = Arc::new(Dispatcher::new(Arc::clone(&shared), self.dedupe_capacity));
        Ok(Bot {
            inner: Arc::new(BotInner {
                shared,
                dispatcher,
                intake: Mutex::new(None),
                closed: watch::channel(true).0,
                stopping: AtomicBool::new(false),
                transport_lock: tokio::sync::Mutex::new(()),
                jobs: self.jobs,
                scheduler_lease: self.scheduler_lease,
                job_tasks: Mutex::new(Vec::new()),
                repairer: Mutex::new(None),
            }),
        })
    }
}

struct BotInner {
    shared: Arc<Shared>,
    dispatcher: Arc<Dispatcher>,
    intake: Mutex<Option<JoinHandle<()>>>,
    /// `true` while no provider stream is being read.
    closed: watch::Sender<bool>,
    /// Set by [`Bot::stop`]: the transport may not start again.
    stopping: AtomicBool,
    /// Serializes starting and stopping the transport.
    transport_lock: tokio::sync::Mutex<()>,
    jobs: Vec<JobDef>,
    scheduler_lease: Option<SchedulerLease>,
    job_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The repair queue's task (see `repair.rs`), ended by [`Bot::stop`] after the queues
    /// drained.
    repairer: Mutex<Option<JoinHandle<()>>>,
}

impl BotInner {
    async fn start_transport(&self) -> Result<()> {
        let _serial = self.transport_lock.lock().await;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(BotError::NotRunning);
        }
        let shared = &self.shared;
        if *shared.transport_up.borrow() {
            return Ok(());
        }
        let mut stream = shared.provider.start().await?;
        let dispatcher = Arc::clone(&self.dispatcher);
        let events = Arc::clone(shared);
        let provider_id = shared.provider.id().to_owned();
        let closed = self.closed.clone();
        closed.send_replace(false);
        let intake = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                match event {
                    ProviderEvent::Message(m) => {
                        let key = m.key();
                        // Refused: the bot is closed. The dispatcher reports its other refusals.
                        if let Err(e @ BotError::NotRunning) = dispatcher.dispatch(m) {
                            events.events.error(Some(&key), e);
                        }
                    }
                    ProviderEvent::Status(status) => {
                        events
                            .events
                            .emit(Event::Transport { provider: provider_id.clone(), status });
                    }
                    _ => {}
                }
            }
            closed.send_replace(true);
        });
        if let Ok(mut slot) = self.intake.lock()
            && let Some(old) = slot.replace(intake)
        {
            old.abort();
        }
        shared.transport_up.send_replace(true);
        Ok(())
    }

    async fn stop_transport(&self) -> Result<()> {
        let _serial = self.transport_lock.lock().await;
        let intake = self.intake.lock().ok().and_then(|mut s| s.take());
        let Some(mut intake) = intake else { return Ok(()) };
        self.shared.transport_up.send_replace(false);
        let stopped = self.shared.provider.stop().await;
        // A stopped provider ends its stream; let what it still holds reach the queues.
        if tokio::time::timeout(DRAIN_GRACE, &mut intake).await.is_err() {
            tracing::warn!(target: "botmesh", "provider stream did not end after stop; abandoning it");
            intake.abort();
        }
        stopped.map_err(Into::into)
    }
}

/// The bot as the coordination runtime sees it.
struct BotHost(Weak<BotInner>);

impl BotHost {
    fn inner(&self) -> Result<Arc<BotInner>> {
        self.0.upgrade().ok_or(BotError::NotRunning)
    }
}

#[async_trait]
impl Host for BotHost {
    fn emit(&self, event: Event) {
        if let Ok(inner) = self.inner() {
            inner.shared.events.emit(event);
        }
    }

    fn provider_id(&self) -> String {
        self.inner().map(|i| i.shared.provider.id().to_owned()).unwrap_or_default()
    }

    fn provider_exclusive(&self) -> bool {
        self.inner().is_ok_and(|i| i.shared.provider.capabilities().exclusive_session)
    }

    fn transport_status(&self) -> TransportStatus {
        self.inner().map_or(TransportStatus::Closed, |i| {
            if *i.shared.transport_up.borrow() {
                i.shared.provider.status()
            } else {
                TransportStatus::Closed
            }
        })
    }

    fn transport_running(&self) -> bool {
        self.inner().is_ok_and(|i| *i.shared.transport_up.borrow())
    }

    async fn start_transport(&self) -> Result<(), BotError> {
        self.inner()?.start_transport().await
    }

    async fn stop_transport(&self) -> Result<(), BotError> {
        self.inner()?.stop_transport().await
    }
}

/// How long [`Bot::stop`] waits for the provider's stream to deliver what it still holds.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// A running bot: a provider, a store, and the flows, conversations and handlers it serves.
///
/// Each chat's messages are handled one at a time in arrival order; different chats run in
/// parallel. Cheap to clone.
///
/// ```no_run
/// # async fn demo(provider: impl botmesh_core::Provider) -> Result<(), botmesh_core::BotError> {
/// use botmesh_core::Bot;
///
/// let bot = Bot::builder()
///     .provider(provider)
///     .on_message(|ctx| async move {
///         ctx.reply(format!("you said {}", ctx.body())).await?;
///         Ok::<_, botmesh_core::BotError>(())
///     })
///     .build()?;
/// bot.start().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Bot {
    inner: Arc<BotInner>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("provider", &self.inner.shared.provider.id())
            .finish_non_exhaustive()
    }
}

impl Bot {
    /// A builder; see [`BotBuilder::new`] for the defaults.
    pub fn builder() -> BotBuilder {
        BotBuilder::new()
    }

    /// Starts the bot: the provider's transport (or, under coordination, the heartbeats and
    /// the campaign for an exclusive transport), and handles what arrives until [`Bot::stop`].
    pub async fn start(&self) -> Result<()> {
        let shared = &self.inner.shared;
        self.inner.stopping.store(false, Ordering::SeqCst);
        self.inner.dispatcher.open();
        match &shared.coordination {
            Some(coordination) => {
                if !shared.store.capabilities().atomic_checkpoints() {
                    // Replicas fall back to the local fence only.
                    shared.events.emit(Event::Warning(Warning::NoAtomicCheckpoints));
                }
                let host: Arc<dyn Host> = Arc::new(BotHost(Arc::downgrade(&self.inner)));
                coordination.start(host).await?;
            }
            None => self.inner.start_transport().await?,
        }
        self.start_jobs();
        shared.events.emit(Event::Started);
        Ok(())
    }

    fn start_jobs(&self) {
        let inner = &self.inner;
        let clock = scheduler::Clock::new();
        let coordinator = inner.shared.coordination.as_ref().and_then(|c| c.coordinator());
        let holder = coordinator
            .as_ref()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), |c| c.incarnation().to_owned());
        let lease = inner.scheduler_lease.clone().unwrap_or_else(|| match coordinator {
            Some(c) => SchedulerLease::Coordinator(c),
            None => SchedulerLease::Store(Arc::clone(&inner.shared.store)),
        });
        if let Ok(mut slot) = inner.repairer.lock()
            && slot.is_none()
        {
            let shared = Arc::clone(&inner.shared);
            shared.repairs.open();
            *slot = Some(tokio::spawn(async move { shared.repairs.run(shared.journal()).await }));
        }
        let mut tasks = Vec::new();
        if inner.shared.durability.is_some() {
            let (shared, dispatcher) = (Arc::clone(&inner.shared), Arc::clone(&inner.dispatcher));
            tasks.push(tokio::spawn(crate::dispatcher::replay(shared, dispatcher)));
        }
        for job in &inner.jobs {
            let (bot, job) = (self.clone(), job.clone());
            tasks.push(match job.task.clone() {
                Some(task) => tokio::spawn(scheduler::durable(
                    bot,
                    job,
                    task,
                    lease.clone(),
                    holder.clone(),
                    clock,
                )),
                None => tokio::spawn(scheduler::plain(bot, job, clock)),
            });
        }
        if let Ok(mut slot) = inner.job_tasks.lock() {
            for old in slot.drain(..) {
                old.abort();
            }
            slot.extend(tasks);
        }
    }

    pub(crate) fn emit(&self, event: Event) {
        self.inner.shared.events.emit(event);
    }

    /// Stops the bot without losing what it took.
    ///
    /// 1. Messages handed in from outside ([`Bot::dispatch`], [`Bot::accept`]) are refused from
    ///    now on, so a webhook sender delivers them to another replica.
    /// 2. Every chat finishes the messages already queued, with the transport still up so that
    ///    their replies go out. Under coordination this drain is bounded by `settle`; what is
    ///    left then is handed back (its tickets withdrawn, its journaled messages released for
    ///    the chats' next holders) and a step still running is cut short as at `settle`.
    /// 3. The transport stops, and only then, under coordination, its leadership is given up,
    ///    so an exclusive transport never runs on two replicas; heartbeats stop last.
    /// 4. Journal writes that failed earlier and wait in the repair queue (acknowledgements,
    ///    releases) are tried once more; what still fails stays in the journal, and is tried
    ///    again at the next [`Bot::start`] or taken over by another replica. No task of the
    ///    bot runs once `stop` returned.
    ///
    /// Conversations waiting for an answer end with [`EndReason::Stopped`](crate::EndReason);
    /// persistent checkpoints stay in the store. Nothing is sent for this bot once `stop`
    /// returned. A message its transport delivers while it drains is queued as usual; one
    /// that could not be handled in time is reported as [`BotError::Unhandled`] unless the
    /// journal keeps it for another replica.
    pub async fn stop(&self) -> Result<()> {
        let shared = &self.inner.shared;
        let dispatcher = &self.inner.dispatcher;
        self.inner.stopping.store(true, Ordering::SeqCst);
        if let Ok(mut tasks) = self.inner.job_tasks.lock() {
            for task in tasks.drain(..) {
                task.abort();
            }
        }
        match shared.coordination.as_ref().map(|c| c.settle()) {
            Some(settle) => {
                if tokio::time::timeout(settle, dispatcher.wait_idle()).await.is_err() {
                    dispatcher.hand_back_rest();
                }
            }
            None => dispatcher.wait_idle().await,
        }
        let stopped = self.inner.stop_transport().await;
        // Whatever is still queued cannot be answered here any more.
        dispatcher.hand_back_rest();
        dispatcher.close();
        dispatcher.drained().await;
        // No worker is left to queue a repair: the repair task ends after its pass, and what
        // it had not landed yet is tried once more.
        let repairer = self.inner.repairer.lock().ok().and_then(|mut slot| slot.take());
        if let Some(repairer) = repairer {
            shared.repairs.stop();
            let _ = repairer.await;
        }
        shared.repairs.flush(shared.journal()).await;
        if let Some(coordination) = &shared.coordination {
            coordination.step_down().await;
            coordination.stop().await;
        }
        shared.events.emit(Event::Stopped);
        stopped
    }

    /// Waits until this process runs the provider's transport: at once for a single process or
    /// a shared session; on a standby replica, only once it is elected.
    pub async fn ready(&self) {
        let mut rx = self.inner.shared.transport_up.subscribe();
        let _ = rx.wait_for(|up| *up).await;
    }

    /// Whether this process runs the provider's transport now.
    pub fn is_transport_running(&self) -> bool {
        *self.inner.shared.transport_up.borrow()
    }

    /// Waits until the provider's inbound stream has ended (the transport hung up, or the
    /// bot stopped). Returns at once when the bot is not started.
    pub async fn closed(&self) {
        let mut rx = self.inner.closed.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Hands a message to the bot directly, as a webhook endpoint does. Returns `false` when it
    /// was dropped as a duplicate.
    pub fn dispatch(&self, message: Inbound) -> Result<bool> {
        self.refuse_when_stopping()?;
        self.inner.dispatcher.dispatch(message).map(|a| a == Accepted::Queued)
    }

    /// Refuses messages handed in from outside once [`Bot::stop`] began.
    fn refuse_when_stopping(&self) -> Result<()> {
        match self.inner.stopping.load(Ordering::SeqCst) {
            true => Err(BotError::NotRunning),
            false => Ok(()),
        }
    }

    /// Hands a message to the bot as a webhook endpoint does, and waits until the sender may
    /// acknowledge it (answer `200 OK`): once it is journaled, with durability, and holds its
    /// place in the chat's queue, under coordination. Returns `false` when it was dropped as a
    /// duplicate.
    ///
    /// On an error the message was not taken (the journal or the chat's queue could not be
    /// written, this replica's leases lapsed and are not renewed yet, or the bot is not
    /// running): answer with an error status so that the sender delivers it again. Unlike [`Bot::dispatch`], a message acknowledged after `accept`
    /// survives this process dying when durability is on.
    pub async fn accept(&self, message: Inbound) -> Result<bool> {
        self.refuse_when_stopping()?;
        self.inner.dispatcher.accept(message).await.map(|a| a == Accepted::Queued)
    }

    /// Sends a message to any chat.
    pub async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        self.inner.shared.send(message).await
    }

    /// Subscribes to the event stream. A subscriber that falls more than the channel's capacity
    /// behind loses the oldest events.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.shared.events.subscribe()
    }

    /// Waits until every message handed to the bot so far has been handled.
    pub async fn wait_idle(&self) {
        self.inner.dispatcher.wait_idle().await;
    }

    /// The bot's store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.shared.store
    }

    /// The bot's texts.
    pub fn texts(&self) -> &Texts {
        &self.inner.shared.texts
    }
}
