//! One FIFO queue and one worker task per chat key; chats run in parallel, each chat strictly
//! in order.
//!
//! Under coordination a second task per chat, the ticketer, sits in front of the worker: it
//! takes the chat's tickets in arrival order while the worker is still busy with earlier
//! messages, so a message's place in the chat's queue is fixed when it arrives, not when this
//! replica gets round to it. The worker then waits for each ticket's turn, handles the job, and
//! gives the turn back once the conversation it fed is waiting again or has ended.
//!
//! This module is the chat registry: it queues what arrives, starts a chat's tasks, and
//! drains them at stop. The rest, by role:
//! - `dedupe.rs`: the message ids this process has, pending or taken, and the waiting sender
//!   whose answer settles them;
//! - `job.rs`: what a chat's queue carries (a message, a timer, a takeover) and the answer
//!   owed to a waiting sender;
//! - `ticketer.rs`: journals and takes tickets in arrival order, in front of the worker;
//! - `worker.rs`: runs what each job's turn hands it, bounded by `settle`, and finishes the
//!   turn's run (which acknowledges, hands back, releases);
//! - `journal.rs`: the journal operations a turn's run uses, over the bot's store;
//! - `acks.rs`: the acknowledgements of handled messages, written in batches off their path;
//! - `route.rs`: hooks, the waiting conversation, triggers, handlers;
//! - `conversation.rs`: drives the chat's conversation future, its timers and its end;
//! - `resume.rs`: reads a conversation back from its checkpoint row;
//! - `exits.rs`: cancel words and interrupting triggers;
//! - `replay.rs`: the periodic replay of what dead replicas journaled and never handled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use botmesh_traits::{ChatKey, Content, Error, Inbound};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tracing::{Instrument, Span};

mod acks;
mod conversation;
mod dedupe;
mod exits;
mod job;
mod journal;
mod replay;
mod resume;
mod route;
mod ticketer;
mod worker;

pub(crate) use self::replay::replay;

use self::acks::Acks;
use self::dedupe::{Dedupe, Seen, Waiter};
use self::job::{Job, Journal, Work};
use self::ticketer::ticketer;
use self::worker::Worker;
use crate::coordination::Taken;
use crate::lock::lock;
use crate::shared::Shared;
use crate::telemetry::MessageSpan;
use crate::{BotError, Event, Result};

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_owned())
}

pub(crate) use crate::accepted::Accepted;

/// A chat's registration: where its jobs go, and how many are not finished yet.
struct Entry {
    /// The chat's queue. Its jobs travel boxed: a channel keeps its slots in blocks of 32,
    /// allocated when it opens, and a chat's queues live as long as its worker, so they hold
    /// pointers rather than jobs (about 500 bytes each).
    tx: mpsc::UnboundedSender<Box<Job>>,
    pending: Arc<AtomicUsize>,
}

pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    chats: Mutex<HashMap<ChatKey, Entry>>,
    dedupe: Arc<Mutex<Dedupe>>,
    closed: AtomicBool,
    pending: AtomicUsize,
    idle: Notify,
    workers: AtomicUsize,
    workers_done: Notify,
    /// Set when a stopping bot ran out of time to drain: queued jobs are handed back instead of
    /// run, and running ones are cut short.
    handing_back: AtomicBool,
    hand_back: Notify,
    /// How many times each journaled message failed on a backend or the transport here.
    failures: Mutex<HashMap<String, u32>>,
    /// Acknowledgements queued and not written yet.
    acks: Arc<Acks>,
}

impl Dispatcher {
    pub(crate) fn new(shared: Arc<Shared>, dedupe_capacity: usize) -> Self {
        Self {
            shared,
            chats: Mutex::default(),
            dedupe: Arc::new(Mutex::new(Dedupe::new(dedupe_capacity))),
            closed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            workers: AtomicUsize::new(0),
            workers_done: Notify::new(),
            handing_back: AtomicBool::new(false),
            hand_back: Notify::new(),
            failures: Mutex::default(),
            acks: Arc::default(),
        }
    }

    pub(crate) fn open(&self) {
        self.handing_back.store(false, Ordering::SeqCst);
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Queues a message on its chat.
    pub(crate) fn dispatch(self: &Arc<Self>, inbound: Inbound) -> Result<Accepted> {
        self.queue(inbound.key(), inbound, None)
    }

    /// [`Dispatcher::dispatch`] for a message whose caller computed its key already.
    pub(crate) fn dispatch_keyed(
        self: &Arc<Self>,
        key: ChatKey,
        inbound: Inbound,
    ) -> Result<Accepted> {
        self.queue(key, inbound, None)
    }

    /// Queues a message and waits until its sender may acknowledge it: journaled (with
    /// durability) and holding its ticket (under coordination). On an error the message was
    /// not taken and its id is forgotten, so that the sender's next delivery is (see
    /// `dedupe.rs`); a delivery of a message whose earlier delivery is still being taken is
    /// told to come back later.
    pub(crate) async fn accept(self: &Arc<Self>, inbound: Inbound) -> Result<Accepted> {
        if self.shared.coordination.as_ref().is_some_and(|c| c.stalled()) {
            // Its turns may be another replica's already: nothing taken here is safe until a
            // renewal lands. The sender delivers it to another replica, or again later.
            let reason = "this replica's leases lapsed and are not renewed yet".to_owned();
            return Err(Error::CoordinationUnavailable { reason, source: None }.into());
        }
        let (tx, rx) = oneshot::channel();
        match self.queue(inbound.key(), inbound, Some(tx))? {
            Accepted::Duplicate => Ok(Accepted::Duplicate),
            Accepted::Queued => rx.await.unwrap_or(Err(BotError::NotRunning)),
        }
    }

    /// Queues `inbound`, of chat `key`, for its chat's worker.
    fn queue(
        self: &Arc<Self>,
        key: ChatKey,
        inbound: Inbound,
        accepted: Option<oneshot::Sender<Result<Accepted>>>,
    ) -> Result<Accepted> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BotError::NotRunning);
        }
        let meters = self.shared.meters.provider(&inbound.provider);
        meters.received.increment(1);
        let (size, limit) = (body_size(&inbound.content), self.shared.def.max_body_bytes);
        if size > limit {
            let too_large =
                || Error::TooLarge { what: format!("message {}", inbound.id), size, limit };
            self.shared.events.error(Some(&key), too_large().into());
            return Err(too_large().into());
        }
        let state = if accepted.is_some() { Seen::Pending } else { Seen::Taken };
        let admitted = lock(&self.dedupe).admit(&inbound.provider, inbound.id.as_str(), state);
        let id = match admitted {
            Ok(id) => id,
            Err(Seen::Pending) if accepted.is_some() => {
                // Its earlier delivery may still be refused: this one cannot be answered yet.
                let reason =
                    format!("an earlier delivery of message {} is still being taken", inbound.id);
                return Err(Error::CoordinationUnavailable { reason, source: None }.into());
            }
            Err(_) => {
                meters.deduplicated.increment(1);
                self.shared.events.emit(Event::Duplicate { key, id: inbound.id });
                return Ok(Accepted::Duplicate);
            }
        };
        let accepted = accepted.map(|tx| Waiter::new(tx, Arc::clone(&self.dedupe), id));
        self.one_more();
        let journal =
            if self.shared.durability.is_some() { Journal::Pending } else { Journal::Off };
        let span = MessageSpan::arrived(&inbound, &key, &self.shared.owner);
        let mut job = Job { work: Work::Message(inbound), ticket: None, journal, accepted, span };
        if self.shared.coordination.is_none() && self.shared.durability.is_none() {
            // Nothing to write first: queued is as safe as it gets.
            job.answer(Ok(()));
        }
        if !self.enqueue(&key, job) {
            self.done_one();
            return Err(BotError::NotRunning);
        }
        Ok(Accepted::Queued)
    }

    /// Queues a message that is already in the journal under `id`: one an earlier process on
    /// the same store left pending (a single process replays them at start).
    pub(crate) fn requeue(self: &Arc<Self>, taken: Taken, id: String) {
        let key = taken.inbound.key();
        self.one_more();
        let span = self.taken_span(&taken);
        let job = Job {
            work: Work::Message(taken.inbound),
            ticket: None,
            journal: Journal::Recorded { id, since: Instant::now(), first: false },
            accepted: None,
            span,
        };
        if !self.enqueue(&key, job) {
            // Stopping: the record stays pending in the journal for another replica.
            self.done_one();
        }
    }

    /// Queues a takeover of chat `key`'s unfinished journaled messages (see
    /// [`Work::TakeOver`]): it takes a ticket like a message, so the messages are claimed and
    /// handled under the chat's turn, before whatever arrives after it.
    pub(crate) fn take_over(self: &Arc<Self>, key: &ChatKey, passed: Vec<String>) {
        let job = Job {
            work: Work::TakeOver { passed },
            ticket: None,
            journal: Journal::Off,
            accepted: None,
            span: Span::none(),
        };
        // Counted like a message: the bot is not idle while it takes messages over.
        self.one_more();
        if !self.enqueue(key, job) {
            self.done_one();
        }
    }

    /// Hands a job to the chat's worker, starting one (and its ticketer) if the chat has none.
    /// Returns `false` once the dispatcher is closed.
    fn enqueue(self: &Arc<Self>, key: &ChatKey, job: Job) -> bool {
        let job = Box::new(job);
        let mut chats = lock(&self.chats);
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        let job = match chats.get(key) {
            Some(entry) => {
                entry.pending.fetch_add(1, Ordering::SeqCst);
                match entry.tx.send(job) {
                    Ok(()) => return true,
                    // The worker is gone without unregistering (it cannot, but be safe).
                    Err(mpsc::error::SendError(job)) => {
                        entry.pending.fetch_sub(1, Ordering::SeqCst);
                        job
                    }
                }
            }
            None => job,
        };
        let (worker_tx, worker_rx) = mpsc::unbounded_channel();
        let tx = match &self.shared.coordination {
            Some(coordination) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let shared = Arc::clone(&self.shared);
                tokio::spawn(ticketer(
                    shared,
                    Arc::clone(coordination),
                    key.clone(),
                    rx,
                    worker_tx,
                ));
                tx
            }
            None => worker_tx,
        };
        let pending = Arc::new(AtomicUsize::new(1));
        // A fresh receiver is open, so this send cannot fail.
        let _ = tx.send(job);
        chats.insert(key.clone(), Entry { tx, pending: Arc::clone(&pending) });
        drop(chats);
        self.workers.fetch_add(1, Ordering::SeqCst);
        let span = tracing::debug_span!("chat", key = %key);
        let worker = Worker {
            disp: Arc::clone(self),
            key: key.clone(),
            pending,
            turn: Arc::default(),
            active: None,
            serial: 0,
            seen_chat: false,
            outcome: crate::coordination::Outcome::default(),
            leftover: None,
            failed: AtomicBool::new(false),
            current: None,
        };
        tokio::spawn(worker.run(worker_rx).instrument(span));
        true
    }

    /// The span of a message taken over here.
    pub(super) fn taken_span(&self, taken: &Taken) -> Span {
        MessageSpan::taken_over(taken, &self.shared.owner, self.shared.propagation.as_deref())
    }

    /// Counts one more message (or takeover) queued and not finished.
    fn one_more(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.shared.meters.queue_depth.increment(1.0);
    }

    fn done_one(&self) {
        self.shared.meters.queue_depth.decrement(1.0);
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Messages (and takeovers) queued and not finished.
    pub(crate) fn queue_depth(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Whether every queued message has been handled, its acknowledgement written.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0 && self.acks.is_settled()
    }

    /// Waits until every queued message has been handled, its acknowledgement written.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.pending.load(Ordering::SeqCst) != 0 {
                notified.await;
                continue;
            }
            // A job queues its acknowledgement before it counts as done.
            self.acks.settled().await;
            if self.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
        }
    }

    /// Waits until the acknowledgements queued so far are written (or queued for repair).
    pub(crate) async fn acks_settled(&self) {
        self.acks.settled().await;
    }

    /// Stops taking messages; every worker goes on with what its chat queued, then ends.
    pub(crate) fn close(&self) {
        let mut chats = lock(&self.chats);
        self.closed.store(true, Ordering::SeqCst);
        chats.clear();
    }

    /// Waits until every worker finished its queue and ended (after [`Dispatcher::close`]).
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.workers_done.notified();
            if self.workers.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Gives up draining: queued jobs are handed back to the chats' next holders instead of
    /// run, and the running ones are cut short as at `settle`.
    pub(crate) fn hand_back_rest(&self) {
        self.handing_back.store(true, Ordering::SeqCst);
        self.hand_back.notify_waiters();
    }

    fn handing_back(&self) -> bool {
        self.handing_back.load(Ordering::SeqCst)
    }

    /// Resolves once [`Dispatcher::hand_back_rest`] was called.
    async fn handing_back_now(&self) {
        loop {
            let notified = self.hand_back.notified();
            if self.handing_back() {
                return;
            }
            notified.await;
        }
    }
}

/// The bytes a message's content weighs against the body limit: its text, and the raw
/// payload of content the provider could not map.
fn body_size(content: &Content) -> usize {
    match content {
        Content::Unsupported { kind, raw } => kind.len() + raw.len(),
        Content::Edit { content, .. } => body_size(content),
        other => other.as_text().map_or(0, str::len),
    }
}
