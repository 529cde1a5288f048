//! One FIFO queue and one worker task per chat key; chats run in parallel, each chat strictly
//! in order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use botmesh_traits::{ChatKey, ChatRecord, Error, Inbound};
use futures_util::FutureExt;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::Instrument;

use crate::bot::Shared;
use crate::conv::{CHECKPOINT_VERSION, CheckpointDoc, Input, Link, Park};
use crate::flow::Def;
use crate::runner::{self, Next, Resume};
use crate::texts::keys;
use crate::{BotError, ConvCtx, Ctx, EndReason, Event, Message, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section on these mutexes is a few map operations without user code.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_owned())
}

/// What became of a message handed to [`Dispatcher::dispatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepted {
    Queued,
    Duplicate,
}

/// Remembers the last `capacity` message ids to drop duplicates within this process.
struct Dedupe {
    seen: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
    capacity: usize,
}

impl Dedupe {
    fn insert(&mut self, provider: &str, id: &str) -> bool {
        if self.capacity == 0 {
            return true;
        }
        let entry = (provider.to_owned(), id.to_owned());
        if self.seen.contains(&entry) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.seen.insert(entry.clone());
        self.order.push_back(entry);
        true
    }
}

pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    chats: Mutex<HashMap<ChatKey, mpsc::UnboundedSender<Inbound>>>,
    dedupe: Mutex<Dedupe>,
    closed: AtomicBool,
    pending: AtomicUsize,
    idle: Notify,
    workers: AtomicUsize,
    workers_done: Notify,
}

impl Dispatcher {
    pub(crate) fn new(shared: Arc<Shared>, dedupe_capacity: usize) -> Self {
        Self {
            shared,
            chats: Mutex::default(),
            dedupe: Mutex::new(Dedupe {
                seen: HashSet::new(),
                order: VecDeque::new(),
                capacity: dedupe_capacity,
            }),
            closed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            workers: AtomicUsize::new(0),
            workers_done: Notify::new(),
        }
    }

    pub(crate) fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Queues a message on its chat's worker.
    pub(crate) fn dispatch(self: &Arc<Self>, inbound: Inbound) -> Result<Accepted> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BotError::NotRunning);
        }
        let key = inbound.key();
        let size = inbound.content.text().map_or(0, str::len);
        if size > self.shared.max_body_bytes {
            let err = Error::InvalidInput {
                reason: format!(
                    "message {} is {size} bytes, over the limit of {}",
                    inbound.id, self.shared.max_body_bytes
                ),
            };
            self.shared.events.error(
                Some(&key),
                BotError::Contract(Error::InvalidInput { reason: err.to_string() }),
            );
            return Err(err.into());
        }
        if !lock(&self.dedupe).insert(&inbound.provider, inbound.id.as_str()) {
            self.shared.events.emit(Event::Duplicate { key, id: inbound.id });
            return Ok(Accepted::Duplicate);
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        let mut chats = lock(&self.chats);
        let inbound = match chats.get(&key) {
            Some(tx) => match tx.send(inbound) {
                Ok(()) => return Ok(Accepted::Queued),
                // The worker is gone without unregistering (it cannot, but be safe).
                Err(mpsc::error::SendError(inbound)) => inbound,
            },
            None => inbound,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // A fresh receiver is open, so this send cannot fail.
        let _ = tx.send(inbound);
        chats.insert(key.clone(), tx);
        drop(chats);
        self.workers.fetch_add(1, Ordering::SeqCst);
        let span = tracing::debug_span!("chat", key = %key);
        let worker = Worker { disp: Arc::clone(self), key, active: None, seen_chat: false };
        tokio::spawn(worker.run(rx).instrument(span));
        Ok(Accepted::Queued)
    }

    fn done_one(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until every queued message has been handled.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Stops taking messages, lets every worker finish its queue, and waits for them.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.chats).clear();
        loop {
            let notified = self.workers_done.notified();
            if self.workers.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

enum Job {
    Message(Inbound),
    Timer(Timer),
}

#[derive(Debug, Clone, Copy)]
enum Timer {
    Timeout,
    Idle(Duration),
}

type ConvFuture = Pin<Box<dyn Future<Output = std::thread::Result<Result<Next>>> + Send>>;

/// A conversation in this worker's memory.
struct Active {
    ctx: ConvCtx,
    name: String,
    fut: ConvFuture,
    parked: Option<(Park, Instant)>,
}

impl Active {
    fn deadline(&self) -> Option<(Instant, Timer)> {
        let (park, since) = self.parked?;
        let timeout = park.timeout.map(|t| (since + t, Timer::Timeout));
        let idle = park.idle.map(|i| (since + i, Timer::Idle(i)));
        match (timeout, idle) {
            (Some(t), Some(i)) => Some(if i.0 < t.0 { i } else { t }),
            (t, i) => t.or(i),
        }
    }
}

enum Driven {
    Parked(Park),
    Exited(std::thread::Result<Result<Next>>),
}

/// Polls a conversation until it ends or parks on a wait.
struct DriveUntilParked<'a> {
    active: &'a mut Active,
}

impl Future for DriveUntilParked<'_> {
    type Output = Driven;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Driven> {
        let active = &mut *self.active;
        match active.fut.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Driven::Exited(out)),
            Poll::Pending => match active.ctx.link().parked() {
                Some(park) => Poll::Ready(Driven::Parked(park)),
                None => Poll::Pending,
            },
        }
    }
}

struct Worker {
    disp: Arc<Dispatcher>,
    key: ChatKey,
    active: Option<Active>,
    seen_chat: bool,
}

impl Worker {
    fn shared(&self) -> &Arc<Shared> {
        &self.disp.shared
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Inbound>) {
        while let Some(job) = self.next_job(&mut rx).await {
            match job {
                Job::Message(inbound) => {
                    let span = tracing::debug_span!("message", id = %inbound.id);
                    self.on_message(inbound).instrument(span).await;
                    self.disp.done_one();
                }
                Job::Timer(timer) => self.on_timer(timer).await,
            }
        }
        if let Some(active) = self.active.take() {
            // The bot is stopping: the conversation ends here, its checkpoint stays.
            self.end(active, EndReason::Stopped).await;
        }
        if self.disp.workers.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.disp.workers_done.notify_waiters();
        }
    }

    async fn next_job(&mut self, rx: &mut mpsc::UnboundedReceiver<Inbound>) -> Option<Job> {
        if let Some(active) = &self.active {
            return match active.deadline() {
                Some((when, timer)) => tokio::select! {
                    biased;
                    m = rx.recv() => m.map(Job::Message),
                    () = tokio::time::sleep_until(when) => Some(Job::Timer(timer)),
                },
                None => rx.recv().await.map(Job::Message),
            };
        }
        match rx.try_recv() {
            Ok(m) => return Some(Job::Message(m)),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        // Nothing queued and no conversation: unregister under the map lock, so that a message
        // arriving now either lands in our queue before we look again or starts a new worker.
        let mut chats = lock(&self.disp.chats);
        match rx.try_recv() {
            Ok(m) => Some(Job::Message(m)),
            Err(_) => {
                chats.remove(&self.key);
                None
            }
        }
    }

    async fn on_message(&mut self, inbound: Inbound) {
        let shared = Arc::clone(self.shared());
        let id = inbound.id.clone();
        if !self.seen_chat {
            self.seen_chat = true;
            let record = ChatRecord::new(inbound.chat.clone(), inbound.provider.clone(), now_ms());
            if let Err(e) = shared.store.upsert_chat(&record).await {
                shared.events.error(Some(&self.key), e.into());
            }
        }
        let Some(msg) = self.run_hooks(Message::new(inbound)).await else { return };
        if let Some(active) = self.active.as_mut() {
            active.parked = None;
            active.ctx.link().deliver(Input::Message(msg));
            self.drive().await;
        } else if let Some((def, resume)) = self.load_checkpoint(&msg).await {
            self.install(def, msg, Some(resume));
            self.drive().await;
        } else if let Some(def) =
            shared.triggered.iter().find(|d| d.triggers().iter().any(|t| t.matches(&msg)))
        {
            self.install(def.clone(), msg, None);
            self.drive().await;
        } else {
            self.run_handlers(msg).await;
        }
        shared.events.emit(Event::Handled { key: self.key.clone(), id });
    }

    async fn run_hooks(&mut self, mut msg: Message) -> Option<Message> {
        for hook in &self.shared().hooks {
            match AssertUnwindSafe(hook(msg)).catch_unwind().await {
                Ok(Ok(m)) => msg = m,
                Ok(Err(source)) => {
                    self.report(BotError::Handler { key: self.key.clone(), source });
                    return None;
                }
                Err(panic) => {
                    self.report(BotError::Panic {
                        key: self.key.clone(),
                        message: panic_message(&*panic),
                    });
                    return None;
                }
            }
        }
        Some(msg)
    }

    async fn run_handlers(&mut self, msg: Message) {
        let shared = Arc::clone(self.shared());
        for handler in &shared.handlers {
            let ctx = Ctx::new(Arc::clone(&shared), msg.clone());
            match AssertUnwindSafe(handler(ctx.clone())).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(source)) => self.report(BotError::Handler { key: self.key.clone(), source }),
                Err(panic) => self.report(BotError::Panic {
                    key: self.key.clone(),
                    message: panic_message(&*panic),
                }),
            }
            if let Some(name) = ctx.take_start() {
                match shared.defs.get(&name) {
                    Some(def) => {
                        self.install(def.clone(), msg, None);
                        self.drive().await;
                    }
                    None => self.report(BotError::UnknownConversation { name }),
                }
                return;
            }
        }
    }

    /// Looks for a persistent flow's checkpoint to continue from.
    async fn load_checkpoint(&mut self, msg: &Message) -> Option<(Def, Resume)> {
        let shared = Arc::clone(self.shared());
        if !shared.has_persistent {
            return None;
        }
        let record = match shared.store.get_checkpoint(self.key.as_str()).await {
            Ok(r) => r?,
            Err(e) => {
                self.report(e.into());
                return None;
            }
        };
        let doc = serde_json::from_str::<CheckpointDoc>(&record.data)
            .map_err(|e| e.to_string())
            .and_then(|doc| {
                if doc.v != CHECKPOINT_VERSION {
                    return Err(format!("unknown checkpoint version {}", doc.v));
                }
                match shared.defs.get(&doc.flow) {
                    Some(Def::Flow(f)) if doc.step < f.steps.len() => {
                        Ok((Def::Flow(Arc::clone(f)), doc))
                    }
                    Some(Def::Flow(_)) => {
                        Err(format!("flow {:?} has no step {}", doc.flow, doc.step))
                    }
                    _ => Err(format!("no flow named {:?}", doc.flow)),
                }
            });
        match doc {
            Ok((def, doc)) => {
                let preset = (doc.question == Some(0)).then(|| msg.clone());
                Some((def, Resume { step: doc.step, state: doc.state, preset }))
            }
            Err(reason) => {
                self.report(BotError::CorruptCheckpoint {
                    key: self.key.clone(),
                    source: reason.into(),
                });
                if let Err(e) = shared.store.clear_checkpoint(self.key.as_str()).await {
                    self.report(e.into());
                }
                None
            }
        }
    }

    fn install(&mut self, def: Def, msg: Message, resume: Option<Resume>) {
        let shared = Arc::clone(self.shared());
        let name = def.name().to_owned();
        let ctx = ConvCtx::new(
            shared.clone(),
            Arc::new(Link::default()),
            msg,
            name.clone(),
            def.timeout(),
        );
        let resumed = resume.is_some();
        if resumed {
            ctx.adopt_checkpoint();
        }
        shared.events.emit(Event::ConversationStarted {
            key: self.key.clone(),
            name: name.clone(),
            resumed,
        });
        let fut = AssertUnwindSafe(runner::run(ctx.clone(), def, resume)).catch_unwind();
        self.active = Some(Active { ctx, name, fut: Box::pin(fut), parked: None });
    }

    /// Runs the active conversation until it waits again or ends, following `goto`s.
    async fn drive(&mut self) {
        while let Some(active) = self.active.as_mut() {
            let out = match (DriveUntilParked { active: &mut *active }).await {
                Driven::Parked(park) => {
                    active.parked = Some((park, Instant::now()));
                    return;
                }
                Driven::Exited(out) => out,
            };
            let Some(active) = self.active.take() else { return };
            match out {
                Ok(Ok(Next::End)) => self.end(active, EndReason::Completed).await,
                Ok(Ok(Next::Start(name))) => {
                    let msg = active.ctx.message();
                    self.end(active, EndReason::Replaced).await;
                    match self.shared().defs.get(&name).cloned() {
                        Some(def) => self.install(def, msg, None),
                        None => self.report(BotError::UnknownConversation { name }),
                    }
                }
                Ok(Err(BotError::Idle { .. })) => self.end(active, EndReason::Idle).await,
                Ok(Err(e)) => {
                    self.report(e);
                    self.end(active, EndReason::Failed).await;
                }
                Err(panic) => {
                    self.report(BotError::Panic {
                        key: self.key.clone(),
                        message: panic_message(&*panic),
                    });
                    self.end(active, EndReason::Failed).await;
                }
            }
        }
    }

    async fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Timeout => {
                let Some(active) = self.active.take() else { return };
                let text = active.ctx.text(keys::TIMEOUT);
                if let Err(e) = active.ctx.send(text).await {
                    self.report(e);
                }
                self.end(active, EndReason::Timeout).await;
            }
            Timer::Idle(after) => {
                let Some(active) = self.active.as_mut() else { return };
                active.parked = None;
                active.ctx.link().deliver(Input::Idle(after));
                self.drive().await;
            }
        }
    }

    async fn end(&mut self, active: Active, reason: EndReason) {
        // Dropping the future first stops whatever the conversation was doing.
        let Active { ctx, name, fut, .. } = active;
        drop(fut);
        if reason != EndReason::Stopped
            && let Err(e) = ctx.clear_checkpoint().await
        {
            self.report(e);
        }
        self.shared().events.emit(Event::ConversationEnded { key: self.key.clone(), name, reason });
    }

    fn report(&self, error: BotError) {
        self.shared().events.error(Some(&self.key), error);
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
