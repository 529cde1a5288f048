//! The running bot: starting and stopping it, its transport, and what it offers the
//! coordination runtime (`BotHost`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use botmesh_traits::{
    Inbound, Outbound, ProviderEvent, SendReceipt, Store, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::builder::BotBuilder;
use crate::coordination::Host;
use crate::dispatcher::{Accepted, Dispatcher};
use crate::scheduler::{self, JobDef};
use crate::shared::Shared;
use crate::{BotError, Event, Result, SchedulerLease, Texts, Warning};

/// What every clone of a [`Bot`] points to.
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
                intake: Mutex::new(None),
                closed: watch::channel(true).0,
                stopping: AtomicBool::new(false),
                transport_lock: tokio::sync::Mutex::new(()),
                jobs,
                scheduler_lease,
                job_tasks: Mutex::new(Vec::new()),
                repairer: Mutex::new(None),
            }),
        }
    }

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
        &self.inner.shared.def.texts
    }
}
