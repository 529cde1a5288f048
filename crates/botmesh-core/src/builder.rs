//! Building a bot: what it is made of (provider, store, flows, handlers, hooks, jobs,
//! coordination, hand-over, durability), checked once by [`BotBuilder::build`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{BoxError, Provider, Store};

use crate::boxing::errors_boxed;
use crate::coordination::Coordination;
use crate::dispatcher::Dispatcher;
use crate::event::{EventBus, Listener};
use crate::flow::Def;
use crate::providers::Providers;
use crate::repair::Repairs;
use crate::scheduler::{JobDef, JobFn, job_fn};
use crate::shared::{Definitions, HandlerFn, HookFn, Shared};
use crate::telemetry::{self, MeteredStore, Meters, TracePropagation, journal_backlog};
use crate::{
    Bot, ConfigError, Conversation, Ctx, Durability, Event, Flow, Handover, JobCtx, MemoryStore,
    Message, SchedulerLease, TaskOptions, Texts, Timing, Trigger,
};

/// Builds a [`Bot`].
///
/// Defaults: a [`MemoryStore`], English as the default language, duplicate ids remembered
/// for the last 10,000 messages, message bodies up to 256 KiB, and an event channel of 1,024
/// events per subscriber.
///
/// ```
/// use botmesh_core::{Bot, BotError, Trigger};
/// # use botmesh_testing::TestProvider;
///
/// # fn main() -> Result<(), botmesh_core::ConfigError> {
/// # let provider = TestProvider::new();
/// let bot: Bot = Bot::builder()
///     .provider(provider)
///     .default_lang("es")
///     .cancel_on(Trigger::keyword("basta"))
///     .on_message(|ctx| async move {
///         ctx.reply(ctx.text("greeting")).await?;
///         Ok::<_, BotError>(())
///     })
///     .text("es", "greeting", "¡Hola!")
///     .build()?;
/// # let _ = bot;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build()`"]
pub struct BotBuilder {
    providers: Vec<Arc<dyn Provider>>,
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
    propagation: Option<Arc<dyn TracePropagation>>,
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
            providers: Vec::new(),
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
            propagation: None,
        }
    }

    /// Adds a provider: the bot answers on each one it is given (at least one). Their ids must
    /// differ; each exclusive one is elected on its own among replicas.
    pub fn provider(self, provider: impl Provider) -> Self {
        self.provider_arc(Arc::new(provider))
    }

    /// Adds a provider already shared.
    pub fn provider_arc(mut self, provider: Arc<dyn Provider>) -> Self {
        self.providers.push(provider);
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
            Box::pin(errors_boxed(fut))
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
            Box::pin(errors_boxed(fut))
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
    /// [`Error::TooLarge`](crate::Error::TooLarge) and reported.
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

    /// Where the leadership of durable tasks comes from. Defaults to the bot's coordination
    /// when it is coordinated, else to the bot's store's leases.
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

    /// Keeps each journaled message's trace context with it, so that the span a replica that
    /// takes the message over gives it links to the span it had where it arrived: see
    /// [`telemetry`](crate::telemetry). Only with [`durability`](Self::durability), which
    /// journals messages.
    pub fn trace_propagation(mut self, propagation: impl TracePropagation) -> Self {
        self.propagation = Some(Arc::new(propagation));
        self
    }

    /// Builds the bot.
    ///
    /// The bot takes its metric handles from the `metrics` recorder installed now: install
    /// yours before (see [`telemetry`](crate::telemetry)).
    pub fn build(self) -> Result<Bot, ConfigError> {
        if self.providers.is_empty() {
            return Err(ConfigError::MissingProvider);
        }
        let providers =
            Providers::new(self.providers).map_err(|id| ConfigError::DuplicateProvider { id })?;
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let store: Arc<dyn Store> = Arc::new(MeteredStore::new(store));
        let meters = Meters::new(providers.iter().map(|t| &*t.id));
        // The metrics count what events tell (hand-offs, leadership, errors) before anyone else
        // hears of them.
        let mut listeners: Vec<Listener> = vec![Arc::new(telemetry::observe)];
        listeners.extend(self.listeners);
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
        let cas_checkpoints = self.coordination.is_some() && store.cas().is_some();
        if self.durability.is_some() && store.journal().is_none() {
            return Err(ConfigError::NoJournal);
        }
        let owner = self
            .coordination
            .as_ref()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), |c| c.incarnation());
        let journaled_turns = self.durability.is_some()
            && match (&self.coordination, store.journal().and_then(|j| j.place())) {
                (Some(coordination), Some(place)) => coordination.journals(place),
                _ => false,
            };
        let has_flows = !defs.is_empty();
        let def = Definitions {
            has_flows,
            defs,
            triggered,
            handlers: self.handlers,
            hooks: self.hooks,
            cancels: self.cancels,
            texts: self.texts,
            has_persistent,
            has_resumable,
            max_body_bytes: self.max_body_bytes,
            handover: self.handover,
        };
        let shared = Arc::new(Shared {
            def,
            providers,
            store,
            coordination: self.coordination,
            cas_checkpoints,
            durability: self.durability,
            owner,
            journaled_turns,
            repairs: Repairs::new(journal_backlog()),
            events: EventBus::new(listeners, self.event_capacity),
            meters,
            propagation: self.propagation,
        });
        let mut task_ids = HashSet::new();
        for task in self.jobs.iter().filter_map(|j| j.task.as_ref()) {
            if !task_ids.insert(task.id.clone()) {
                return Err(ConfigError::DuplicateName { name: task.id.clone() });
            }
            let store = &shared.store;
            if store.shared() && store.tasks().is_none() && store.cas().is_none() {
                // Two replicas could both read the last occurrence and both claim the next.
                return Err(ConfigError::DurableTaskNeedsAtomicStore { task: task.id.clone() });
            }
        }
        let dispatcher = Arc::new(Dispatcher::new(Arc::clone(&shared), self.dedupe_capacity));
        Ok(Bot::assemble(shared, dispatcher, self.jobs, self.scheduler_lease))
    }
}
