//! The running bot: starting and stopping it, what it offers the coordination runtime
//! (`BotHost`) and its providers' intakes (`Admission`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use botmesh_traits::{
    Admit, Bytes, Error, ErrorKind, Inbound, Intake, Outbound, SendReceipt, Store, TransportStatus,
    Verdict, async_trait,
};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::builder::BotBuilder;
use crate::coordination::{Host, TransportInfo};
use crate::dispatcher::{Accepted, Dispatcher};
use crate::durable;
use crate::providers::Transport;
use crate::scheduler::{self, JobDef};
use crate::shared::Shared;
use crate::status::ReplicaStatus;
use crate::transport::Transports;
use crate::{BotError, Event, Result, SchedulerLease, Texts, Warning};

/// What every clone of a [`Bot`] points to.
struct BotInner {
    shared: Arc<Shared>,
    dispatcher: Arc<Dispatcher>,
    transports: Transports,
    /// Set by [`Bot::stop`]: no transport may start again, nothing is accepted from outside.
    stopping: AtomicBool,
    jobs: Vec<JobDef>,
    scheduler_lease: Option<SchedulerLease>,
    job_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The repair queue's task (see `repair.rs`), ended by [`Bot::stop`] after the queues
    /// drained.
    repairer: Mutex<Option<JoinHandle<()>>>,
    /// When the bot last started; `None` while it is stopped.
    started_at: Mutex<Option<Instant>>,
}

impl BotInner {
    /// Starts provider `id`'s transport here; refused once the bot is stopping.
    async fn start_transport(self: &Arc<Self>, id: &str) -> Result<()> {
        let transport = self.transport(id)?;
        let admission =
            Admission { bot: Arc::downgrade(self), provider: Arc::clone(&transport.id) };
        let intake = Intake::new(Arc::clone(&transport.id), Arc::new(admission))
            .with_store(Arc::clone(&self.shared.store));
        let (shared, dispatcher) = (&self.shared, &self.dispatcher);
        self.transports.start(shared, dispatcher, transport, intake, &self.stopping).await
    }

    async fn stop_transport(&self, id: &str) -> Result<()> {
        self.transports.stop(&self.shared, self.transport(id)?).await
    }

    fn transport(&self, id: &str) -> Result<&Transport> {
        let missing = || Error::NoSuchProvider { provider: id.to_owned() }.into();
        self.shared.providers.get(id).ok_or_else(missing)
    }

    /// Refuses messages handed in from outside once [`Bot::stop`] began.
    fn refuse_when_stopping(&self) -> Result<()> {
        match self.stopping.load(Ordering::SeqCst) {
            true => Err(BotError::NotRunning),
            false => Ok(()),
        }
    }

    async fn accept(&self, message: Inbound) -> Result<Accepted> {
        self.refuse_when_stopping()?;
        self.dispatcher.accept(message).await
    }

    /// Takes a message whose platform will not deliver it again (see
    /// [`Capabilities::delivers_once`](botmesh_traits::Capabilities)) while the bot stops or
    /// after its transport stopped here (`up` is false): queued while the chats still drain
    /// here, so that it is answered before the transport goes; otherwise, with durability,
    /// journaled as released, so that the replica that handles its chat next (this one after a
    /// restart, for a single process) takes it over. Without durability nothing can keep it:
    /// the provider reports it dropped.
    async fn take_once(&self, message: Inbound, up: bool) -> Verdict {
        if up {
            // Cloned only on this rare path: a refusal must leave the message to keep.
            match self.dispatcher.accept(message.clone()).await {
                // Drained already, or no time left to handle it here.
                Err(BotError::NotRunning) => {}
                accepted => return verdict(accepted),
            }
        }
        match durable::keep(&self.shared, &message).await {
            Ok(kept) => kept,
            Err(e) => {
                self.shared.events.error(Some(&message.key()), e.into());
                Verdict::Unavailable
            }
        }
    }
}

/// The bot's side of provider `provider`'s [`Intake`]: [`Bot::accept`], answered as a
/// [`Verdict`]; only while the provider's transport runs here (a handler may keep a clone of
/// the intake past a stop).
struct Admission {
    bot: Weak<BotInner>,
    provider: Arc<str>,
}

#[async_trait]
impl Admit for Admission {
    async fn admit(&self, message: Inbound) -> Verdict {
        let Some(inner) = self.bot.upgrade() else { return Verdict::Unavailable };
        let providers = &inner.shared.providers;
        let Some(transport) = providers.get(&self.provider) else { return Verdict::Unavailable };
        let up = providers.is_up(transport);
        if transport.delivers_once && (!up || inner.stopping.load(Ordering::SeqCst)) {
            // Refusing it would lose it.
            return inner.take_once(message, up).await;
        }
        match up {
            true => verdict(inner.accept(message).await),
            false => Verdict::Unavailable,
        }
    }

    fn holds_transport(&self) -> bool {
        let Some(inner) = self.bot.upgrade() else { return false };
        let providers = &inner.shared.providers;
        // Still held while a stop drains the chats: their replies go out through it.
        providers.get(&self.provider).is_some_and(|t| providers.is_up(t))
            && !inner.shared.coordination.as_ref().is_some_and(|c| c.stalled())
    }
}

/// What the platform is answered for a message handed to [`Dispatcher::accept`].
fn verdict(accepted: Result<Accepted>) -> Verdict {
    match accepted {
        Ok(accepted) => accepted.into(),
        Err(e) => match e.as_contract().map(Error::kind) {
            Some(ErrorKind::TooLarge) => Verdict::TooLarge,
            Some(ErrorKind::InvalidInput) => Verdict::Invalid,
            // Not running, the journal or the chat's queue not written, leases lapsed: the
            // platform delivers it again, here or at another replica. The dispatcher has
            // reported what failed.
            _ => Verdict::Unavailable,
        },
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

    fn transports(&self) -> Vec<TransportInfo> {
        let Ok(inner) = self.inner() else { return Vec::new() };
        inner
            .shared
            .providers
            .iter()
            .map(|t| {
                TransportInfo::new(t.id.to_string(), t.provider.capabilities().exclusive_session)
            })
            .collect()
    }

    fn transport_status(&self, provider: &str) -> TransportStatus {
        let Ok(inner) = self.inner() else { return TransportStatus::Closed };
        match inner.shared.providers.get(provider) {
            Some(t) if inner.shared.providers.is_up(t) => t.provider.status(),
            _ => TransportStatus::Closed,
        }
    }

    fn transport_running(&self, provider: &str) -> bool {
        self.inner().is_ok_and(|i| {
            i.shared.providers.get(provider).is_some_and(|t| i.shared.providers.is_up(t))
        })
    }

    async fn start_transport(&self, provider: &str) -> Result<(), BotError> {
        self.inner()?.start_transport(provider).await
    }

    async fn stop_transport(&self, provider: &str) -> Result<(), BotError> {
        self.inner()?.stop_transport(provider).await
    }

    fn status(&self) -> ReplicaStatus {
        self.0.upgrade().map(|inner| Bot { inner }.status()).unwrap_or_default()
    }
}

/// A running bot: its providers, a store, and the flows, conversations and handlers it serves.
///
/// Each chat's messages are handled one at a time in arrival order; different chats run in
/// parallel. A bot may answer on several providers at once (WhatsApp, Telegram and e-mail,
/// say): each chat belongs to the provider it came from, and replies go out through it. Cheap
/// to clone.
///
/// ```no_run
/// # async fn demo(provider: impl botmesh_core::traits::Provider) -> Result<(), botmesh_core::BotError> {
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
        let providers: Vec<&str> = self.inner.shared.providers.iter().map(|t| &*t.id).collect();
        f.debug_struct("Bot").field("providers", &providers).finish_non_exhaustive()
    }
}

impl Bot {
    /// The bot [`BotBuilder::build`](crate::BotBuilder::build) assembled from checked parts.
    pub(crate) fn assemble(
        shared: Arc<Shared>,
        dispatcher: Arc<Dispatcher>,
        jobs: Vec<JobDef>,
        scheduler_lease: Option<SchedulerLease>,
    ) -> Self {
        Self {
            inner: Arc::new(BotInner {
                shared,
                dispatcher,
                transports: Transports::new(),
                stopping: AtomicBool::new(false),
                jobs,
                scheduler_lease,
                job_tasks: Mutex::new(Vec::new()),
                repairer: Mutex::new(None),
                started_at: Mutex::new(None),
            }),
        }
    }

    /// A builder; see [`BotBuilder::new`] for the defaults.
    pub fn builder() -> BotBuilder {
        BotBuilder::new()
    }

    /// Starts the bot: its providers' transports (or, under coordination, the heartbeats, the
    /// shared transports, and a campaign for each exclusive one), and handles what arrives
    /// until [`Bot::stop`].
    pub async fn start(&self) -> Result<()> {
        let shared = &self.inner.shared;
        self.inner.stopping.store(false, Ordering::SeqCst);
        self.inner.dispatcher.open();
        match &shared.coordination {
            Some(coordination) => {
                if shared.store.cas().is_none() {
                    // Replicas fall back to the local fence only.
                    shared.events.emit(Event::Warning(Warning::NoAtomicCheckpoints));
                }
                let host: Arc<dyn Host> = Arc::new(BotHost(Arc::downgrade(&self.inner)));
                coordination.start(host).await?;
            }
            None => {
                for transport in shared.providers.iter() {
                    if let Err(e) = self.inner.start_transport(&transport.id).await {
                        // Not started after all: no transport of this start keeps running.
                        let _ = self.inner.transports.stop_all(shared).await;
                        return Err(e);
                    }
                }
            }
        }
        self.start_jobs();
        if let Ok(mut started) = self.inner.started_at.lock() {
            *started = Some(Instant::now());
        }
        shared.events.emit(Event::Started);
        Ok(())
    }

    /// Starts the bot, runs it until `signal` resolves, then stops it gracefully (see
    /// [`Bot::stop`]): what a process that is one replica of a rolling deploy runs. Pass
    /// [`shutdown_signal()`](crate::shutdown_signal) to stop on SIGTERM or Ctrl-C.
    ///
    /// ```no_run
    /// # async fn demo(bot: botmesh_core::Bot) -> Result<(), botmesh_core::BotError> {
    /// bot.run_until(botmesh_core::shutdown_signal()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_until(&self, signal: impl Future<Output = ()>) -> Result<()> {
        self.start().await?;
        signal.await;
        tracing::info!(target: "botmesh", "stopping on signal");
        self.stop().await
    }

    /// Whether the bot is started and not stopping.
    pub(crate) fn running(&self) -> bool {
        !self.inner.stopping.load(Ordering::SeqCst) && self.started_at().is_some()
    }

    /// When the bot last started, while it runs.
    pub(crate) fn started_at(&self) -> Option<Instant> {
        self.inner.started_at.lock().ok().and_then(|s| *s)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn queue_depth(&self) -> usize {
        self.inner.dispatcher.queue_depth()
    }

    fn start_jobs(&self) {
        let inner = &self.inner;
        let clock = scheduler::Clock::new();
        let coordination = inner.shared.coordination.clone();
        let holder = coordination
            .as_ref()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), |c| c.incarnation());
        let lease = inner.scheduler_lease.clone().unwrap_or_else(|| match coordination {
            Some(c) => SchedulerLease::Coordination(c),
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
    ///    now on, so a webhook sender delivers them to another replica. A provider whose
    ///    platform never delivers a message again
    ///    ([`Capabilities::delivers_once`](botmesh_traits::Capabilities)) is not refused: what
    ///    it hands in is drained with the rest, or, once its transport stopped, journaled for
    ///    whoever handles the chat next (with durability).
    /// 2. Every chat finishes the messages already queued, and those a transport delivered on
    ///    its inbound stream before this call, with the transport still up so that their
    ///    replies go out. Under coordination this drain is bounded by `settle`; what is
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
        // What the transports delivered before this call is queued first, and drained with
        // the rest.
        let drain = async {
            self.inner.transports.catch_up(shared).await;
            dispatcher.wait_idle().await;
        };
        match shared.coordination.as_ref().map(|c| c.settle()) {
            Some(settle) => {
                if tokio::time::timeout(settle, drain).await.is_err() {
                    dispatcher.hand_back_rest();
                }
            }
            None => drain.await,
        }
        let stopped = self.inner.transports.stop_all(shared).await;
        // Whatever is still queued cannot be answered here any more.
        dispatcher.hand_back_rest();
        dispatcher.close();
        dispatcher.drained().await;
        // What failed of them goes to the repair queue, flushed below.
        dispatcher.acks_settled().await;
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
        if let Ok(mut started) = self.inner.started_at.lock() {
            *started = None;
        }
        shared.events.emit(Event::Stopped);
        stopped
    }

    /// Waits until this process runs a transport: at once for a single process or a shared
    /// session; on a standby replica, only once it is elected for one.
    pub async fn ready(&self) {
        self.inner.shared.providers.wait_up(None).await;
    }

    /// Waits until this process runs provider `provider`'s transport; `NoSuchProvider` at once
    /// for an id the bot does not have.
    pub async fn ready_for(&self, provider: &str) -> Result<()> {
        self.inner.transport(provider)?;
        self.inner.shared.providers.wait_up(Some(provider)).await;
        Ok(())
    }

    /// Whether this process runs a transport now.
    pub fn is_transport_running(&self) -> bool {
        self.inner.shared.providers.any_up()
    }

    /// Whether this process runs provider `provider`'s transport now.
    pub fn runs_transport(&self, provider: &str) -> bool {
        let providers = &self.inner.shared.providers;
        providers.get(provider).is_some_and(|t| providers.is_up(t))
    }

    /// Waits until every inbound stream has ended (the transports hung up, or the bot
    /// stopped). Returns at once when the bot is not started.
    pub async fn closed(&self) {
        self.inner.transports.closed().await;
    }

    /// The bytes of a file a user sent, fetched through the provider that received it.
    /// [`Ctx::media`](crate::Ctx::media) does the same in a handler.
    pub async fn fetch_media(&self, message: &Inbound) -> Result<Bytes> {
        self.inner.shared.fetch_media(message).await
    }

    /// Hands a message to the bot directly and returns at once: [`Accepted::Duplicate`] when
    /// it was dropped as a duplicate. Use [`Bot::accept`] when the sender waits for an answer.
    pub fn dispatch(&self, message: Inbound) -> Result<Accepted> {
        self.inner.refuse_when_stopping()?;
        self.inner.dispatcher.dispatch(message)
    }

    /// Hands a message to the bot as a webhook endpoint does, and waits until the sender may
    /// acknowledge it (answer `200 OK`): once it is journaled, with durability, and holds its
    /// place in the chat's queue, under coordination. [`Accepted::Duplicate`] when it was
    /// dropped as a duplicate; both outcomes are answered `200`.
    ///
    /// On an error the message was not taken (the journal or the chat's queue could not be
    /// written, this replica's leases lapsed and are not renewed yet, or the bot is not
    /// running): answer with an error status so that the sender delivers it again. Unlike
    /// [`Bot::dispatch`], a message acknowledged after `accept` survives this process dying when
    /// durability is on.
    ///
    /// A provider does the same through the [`Intake`] it is given at start, and gets the
    /// outcome as a [`Verdict`] to answer its platform with.
    pub async fn accept(&self, message: Inbound) -> Result<Accepted> {
        self.inner.accept(message).await
    }

    /// Sends a message to any chat, through the provider it names
    /// ([`Outbound::via`](botmesh_traits::Outbound::via)), or the bot's only provider. Fails with
    /// `ProviderNotLeader` when that provider's exclusive transport runs on another replica, and
    /// `NoSuchProvider` when it names none and the bot has several.
    pub async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        self.inner.shared.send(message, None).await
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

    /// Whether every message handed to the bot so far has been handled, now.
    pub fn is_idle(&self) -> bool {
        self.inner.dispatcher.is_idle()
    }

    /// The bot's store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.shared.store
    }

    /// The bot's texts.
    pub fn texts(&self) -> &Texts {
        &self.inner.shared.def.texts
    }
}
