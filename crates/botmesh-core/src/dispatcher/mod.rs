//! One FIFO queue and one worker task per chat key; chats run in parallel, each chat strictly
//! in order.
//!
//! Under coordination a second task per chat, the ticketer, sits in front of the worker: it
//! takes the chat's tickets in arrival order while the worker is still busy with earlier
//! messages, so a message's place in the chat's queue is fixed when it arrives, not when this
//! replica gets round to it. The worker then waits for each ticket's turn, handles the job, and
//! gives the turn back once the conversation it fed is waiting again or has ended.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use botmesh_traits::{
    ChatKey, ChatRecord, Error, ErrorKind, Inbound, InboxRecord, InboxState, LeaseLostReason,
    Recovery, ReleaseOptions, Ticket,
};
use futures_util::FutureExt;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

mod exits;
mod resume;

use self::exits::Exit;
use self::resume::Found;
use crate::bot::Shared;
use crate::conv::{Input, Link, Park};
use crate::coordination::{Coordination, Turn, TurnSlot};
use crate::durable::{self, Claim, Journaled};
use crate::flow::Def;
use crate::handover::FlowHandover;
use crate::runner::{self, Next, Resume};
use crate::texts::keys;
use crate::{BotError, ConvCtx, Ctx, EndReason, Event, HandoverOutcome, Message, Result};

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

    /// Forgets an id, so that the sender's next delivery of a refused message is taken.
    fn forget(&mut self, provider: &str, id: &str) {
        self.seen.remove(&(provider.to_owned(), id.to_owned()));
    }
}

/// Something a chat's worker does under the chat's turn.
enum Work {
    Message(Inbound),
    /// A conversation timer came due: `serial` names the conversation, `park` the wait.
    Timer {
        serial: u64,
        park: u64,
        timer: Timer,
    },
    /// Take over, under the chat's turn and in journal order, the chat's journaled messages
    /// that these incarnations (dead ones) or any replica (released ones) left unfinished.
    TakeOver {
        passed: Vec<String>,
    },
}

/// Where a message stands with the inbox journal.
enum Journal {
    /// Durability is off (or this is a timer).
    Off,
    /// To be journaled before it takes a ticket.
    Pending,
    /// In the journal under `id`, this replica's since `since`. `first` when this job journaled
    /// it: no earlier run can have acted on it.
    Recorded { id: String, since: Instant, first: bool },
    /// Already in the journal: a retry of a message this or another replica has.
    Duplicate,
    /// Refused to a sender waiting in [`Dispatcher::accept`] (the journal or the ticket could
    /// not be written): the sender delivers it again, so it is not handled here.
    Refused,
    /// Pending in the journal under a live replica that may be handling it now: a sender
    /// waiting in [`Dispatcher::accept`] is told to deliver it again later, when it is either
    /// done (a duplicate then) or released to whoever receives it.
    Elsewhere,
}

/// Tells a sender waiting in [`Dispatcher::accept`] what became of its message.
type AcceptTx = oneshot::Sender<Result<Accepted>>;

/// A unit of work with, under coordination, the ticket taken for it on arrival.
struct Job {
    work: Work,
    ticket: Option<Result<Ticket, Error>>,
    journal: Journal,
    /// A sender waiting to acknowledge the message (see [`Dispatcher::accept`]).
    accepted: Option<AcceptTx>,
}

impl Job {
    fn timer(serial: u64, park: u64, timer: Timer) -> Self {
        Self {
            work: Work::Timer { serial, park, timer },
            ticket: None,
            journal: Journal::Off,
            accepted: None,
        }
    }

    /// Answers the waiting sender, if any, once the message is journaled (with durability)
    /// and, under coordination, `ticketed` says whether its ticket was taken. A message the
    /// sender must deliver again is marked [`Journal::Refused`].
    fn answer(&mut self, ticketed: Result<(), &Error>) {
        let Some(tx) = self.accepted.take() else { return };
        let answer = match (&self.journal, ticketed) {
            (Journal::Duplicate, _) => Ok(Accepted::Duplicate),
            (Journal::Elsewhere, _) => Err(Error::CoordinationUnavailable {
                reason: "the message is being handled by another replica".to_owned(),
                source: None,
            }
            .into()),
            (Journal::Refused, _) => Err(Error::Store {
                op: "inbox_append",
                source: "the inbox journal could not be written".into(),
            }
            .into()),
            (Journal::Recorded { .. } | Journal::Pending | Journal::Off, Ok(())) => {
                Ok(Accepted::Queued)
            }
            // Journaled but without its place in the chat's queue: the message is released
            // for whoever holds the chat next, and the sender, told to deliver it again, waits
            // for that before it sends anything later (the delivery takes the message over).
            (Journal::Recorded { .. } | Journal::Pending, Err(e)) => {
                Err(Error::CoordinationUnavailable { reason: e.to_string(), source: None }.into())
            }
            (Journal::Off, Err(e)) => {
                self.journal = Journal::Refused;
                Err(Error::CoordinationUnavailable { reason: e.to_string(), source: None }.into())
            }
        };
        let _ = tx.send(answer);
    }
}

/// A journaled message a job handles, as the journal has it.
struct Recorded {
    /// Its journal id.
    id: String,
    /// Since when it is this replica's (journaled or taken over here).
    since: Instant,
    /// The message.
    inbound: Inbound,
}

/// A chat's turn held under coordination, with the coordination that granted it.
type Held = (Arc<dyn Coordination>, Arc<dyn Turn>);

/// What a turn takes over (see [`Worker::left_over`]), in journal order.
#[derive(Default)]
struct LeftOver {
    /// Journaled before the turn's own message: handled first.
    before: Vec<InboxRecord>,
    /// Journaled after it, with nothing queued elsewhere in between: handled right after.
    after: Vec<InboxRecord>,
    /// Journaled after a message still queued on a live replica: released for a holder after
    /// that one.
    rest: Vec<InboxRecord>,
    /// The turn's own message is no longer this replica's to handle: another holder took it
    /// over (it is acknowledged, or pending under that holder).
    own_gone: bool,
}

/// Sorts the chat's pending journal `records` (in journal order) for a turn whose grant
/// passed over the incarnations `passed`: what the turn takes before its own message `own`,
/// after it, and what it leaves for a later holder. `me` is this replica's incarnation;
/// `own_taken_back` says it just claimed `own` back from [`durable::RELEASED`]; `complete`
/// that an own message missing from `records` is no longer this replica's (rather than past
/// the end of a listing that stopped short).
fn sort_left_over(
    records: Vec<InboxRecord>,
    passed: &[String],
    own: Option<&str>,
    me: &str,
    own_taken_back: bool,
    complete: bool,
) -> LeftOver {
    let mut left = LeftOver::default();
    let listed = own.is_some_and(|own| records.iter().any(|r| r.id == own));
    // Missing and no longer ours: another holder handled it, or has it. Its place in the
    // journal is unknown, as a takeover's is.
    left.own_gone = own.is_some() && !listed && complete;
    let own = own.filter(|_| !left.own_gone);
    let (mut seen_own, mut blocked) = (false, false);
    for record in records {
        // A hand-back names its replica too; its own queued messages are still its own.
        let takeable = record.owner == durable::RELEASED
            || (record.owner != me && passed.contains(&record.owner));
        if Some(record.id.as_str()) == own {
            seen_own = true;
            // Taken over by another holder, which may be handling it right now: what comes
            // after it waits for that holder.
            left.own_gone = record.owner != me && !own_taken_back;
            blocked = left.own_gone;
        } else if !takeable {
            // Queued on a live replica (this one included) with its own ticket: what comes
            // after it in the journal waits for it. One journaled before the turn's own
            // message had its ticket before this turn's, and is done with it: handled and
            // being acknowledged, or being released. A turn with no place in the journal (a
            // takeover, or a message handled elsewhere meanwhile) cannot tell: any such
            // message may still come after it.
            blocked |= seen_own || own.is_none();
        } else if blocked {
            left.rest.push(record);
        } else if seen_own {
            left.after.push(record);
        } else {
            left.before.push(record);
        }
    }
    left
}

/// A chat's registration: where its jobs go, and how many are not finished yet.
struct Entry {
    tx: mpsc::UnboundedSender<Job>,
    pending: Arc<AtomicUsize>,
}

pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    chats: Mutex<HashMap<ChatKey, Entry>>,
    dedupe: Mutex<Dedupe>,
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
            handing_back: AtomicBool::new(false),
            hand_back: Notify::new(),
            failures: Mutex::default(),
        }
    }

    pub(crate) fn open(&self) {
        self.handing_back.store(false, Ordering::SeqCst);
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Queues a message on its chat.
    pub(crate) fn dispatch(self: &Arc<Self>, inbound: Inbound) -> Result<Accepted> {
        self.queue(inbound, None)
    }

    /// Queues a message and waits until its sender may acknowledge it: journaled (with
    /// durability) and holding its ticket (under coordination). On an error the message was
    /// not taken and its id is forgotten, so that the sender's next delivery is.
    pub(crate) async fn accept(self: &Arc<Self>, inbound: Inbound) -> Result<Accepted> {
        if self.shared.coordination.as_ref().is_some_and(|c| c.stalled()) {
            // Its turns may be another replica's already: nothing taken here is safe until a
            // renewal lands. The sender delivers it to another replica, or again later.
            let reason = "this replica's leases lapsed and are not renewed yet".to_owned();
            return Err(Error::CoordinationUnavailable { reason, source: None }.into());
        }
        let (tx, rx) = oneshot::channel();
        let (provider, id) = (inbound.provider.clone(), inbound.id.clone());
        let answer = match self.queue(inbound, Some(tx))? {
            Accepted::Duplicate => return Ok(Accepted::Duplicate),
            Accepted::Queued => rx.await.unwrap_or(Err(BotError::NotRunning)),
        };
        if answer.is_err() {
            lock(&self.dedupe).forget(&provider, id.as_str());
        }
        answer
    }

    fn queue(self: &Arc<Self>, inbound: Inbound, accepted: Option<AcceptTx>) -> Result<Accepted> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BotError::NotRunning);
        }
        let key = inbound.key();
        let size = inbound.content.text().map_or(0, str::len);
        if size > self.shared.max_body_bytes {
            let reason = format!(
                "message {} is {size} bytes, over the limit of {}",
                inbound.id, self.shared.max_body_bytes
            );
            self.shared
                .events
                .error(Some(&key), Error::InvalidInput { reason: reason.clone() }.into());
            return Err(Error::InvalidInput { reason }.into());
        }
        if !lock(&self.dedupe).insert(&inbound.provider, inbound.id.as_str()) {
            self.shared.events.emit(Event::Duplicate { key, id: inbound.id });
            return Ok(Accepted::Duplicate);
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        let journal =
            if self.shared.durability.is_some() { Journal::Pending } else { Journal::Off };
        let mut job = Job { work: Work::Message(inbound), ticket: None, journal, accepted };
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
    pub(crate) fn requeue(self: &Arc<Self>, inbound: Inbound, id: String) {
        let key = inbound.key();
        self.pending.fetch_add(1, Ordering::SeqCst);
        let job = Job {
            work: Work::Message(inbound),
            ticket: None,
            journal: Journal::Recorded { id, since: Instant::now(), first: false },
            accepted: None,
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
        };
        // Counted like a message: the bot is not idle while it takes messages over.
        self.pending.fetch_add(1, Ordering::SeqCst);
        if !self.enqueue(key, job) {
            self.done_one();
        }
    }

    /// Hands a job to the chat's worker, starting one (and its ticketer) if the chat has none.
    /// Returns `false` once the dispatcher is closed.
    fn enqueue(self: &Arc<Self>, key: &ChatKey, job: Job) -> bool {
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
            cut: false,
            faulted: false,
            leftover: None,
        };
        tokio::spawn(worker.run(worker_rx).instrument(span));
        true
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

/// Journals the messages among `jobs` that wait for it (in one concurrent batch), marking
/// retries of journaled messages as duplicates.
async fn journal_jobs(shared: &Arc<Shared>, jobs: &mut [Job]) {
    let inbound = jobs.iter().filter(|j| matches!(j.journal, Journal::Pending)).filter_map(|j| {
        match &j.work {
            Work::Message(m) => Some(m),
            Work::Timer { .. } | Work::TakeOver { .. } => None,
        }
    });
    let mut results = durable::journal(shared, inbound).await.into_iter();
    for job in jobs.iter_mut().filter(|j| matches!(j.journal, Journal::Pending)) {
        job.journal = match results.next() {
            Some(Journaled::New(id)) => {
                Journal::Recorded { id, since: Instant::now(), first: true }
            }
            Some(Journaled::Adopted(id)) => {
                Journal::Recorded { id, since: Instant::now(), first: false }
            }
            Some(Journaled::Duplicate) => Journal::Duplicate,
            Some(Journaled::Elsewhere) if job.accepted.is_some() => Journal::Elsewhere,
            Some(Journaled::Elsewhere) => Journal::Duplicate,
            // A sender waiting to acknowledge delivers it again; otherwise it is handled
            // without the journal.
            Some(Journaled::Failed) | None if job.accepted.is_some() => {
                if let Work::Message(m) = &job.work {
                    // The append may still land (a timed-out reply): released then, so that
                    // the sender's next delivery, wherever it goes, takes it over.
                    durable::release_if_landed(shared, durable::journal_id(m)).await;
                }
                Journal::Refused
            }
            Some(Journaled::Failed) | None => Journal::Off,
        };
    }
}

/// Journals (with durability) and takes the chat's tickets in arrival order, and passes each
/// job on to the worker. Jobs that arrived together get their tickets in one call; a retry of a
/// journaled message takes none.
async fn ticketer(
    shared: Arc<Shared>,
    coordination: Arc<dyn Coordination>,
    key: ChatKey,
    mut rx: mpsc::UnboundedReceiver<Job>,
    worker: mpsc::UnboundedSender<Job>,
) {
    /// The most tickets taken in one call.
    const BATCH: usize = 64;
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        journal_jobs(&shared, &mut batch).await;
        let takes = |j: &Job| {
            !matches!(j.journal, Journal::Duplicate | Journal::Refused | Journal::Elsewhere)
        };
        let wanted = batch.iter().filter(|j| takes(j)).count();
        let taken = match wanted {
            0 => Ok(Vec::new()),
            n => coordination.take_tickets(&key, n).await,
        };
        let (mut tickets, failure) = match taken {
            Ok(tickets) if tickets.len() == wanted => (tickets.into_iter(), String::new()),
            Ok(_) => (Vec::new().into_iter(), "the backend returned too few tickets".to_owned()),
            Err(e) => (Vec::new().into_iter(), e.to_string()),
        };
        // The replica may have frozen while it took them: a turn it gets now is not to be
        // trusted until its leases are renewed, so a waiting sender is told to deliver again.
        let stalled = coordination.stalled();
        for mut job in batch.drain(..) {
            // Each job of a failed call is reported on its own, with the call's error.
            let ticket = takes(&job).then(|| {
                tickets.next().ok_or_else(|| Error::CoordinationUnavailable {
                    reason: failure.clone(),
                    source: None,
                })
            });
            let ticket = match ticket {
                Some(Ok(ticket)) if stalled && job.accepted.is_some() => {
                    coordination.withdraw(ticket).await;
                    let reason = "this replica's leases lapsed and are not renewed yet".to_owned();
                    Some(Err(Error::CoordinationUnavailable { reason, source: None }))
                }
                ticket => ticket,
            };
            job.answer(match &ticket {
                Some(Err(e)) => Err(e),
                _ => Ok(()),
            });
            if worker.send(Job { ticket, ..job }).is_err() {
                return;
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Timer {
    Timeout,
    Idle(Duration),
}

/// How long a conversation timer that could not get its turn waits before trying again.
const TIMER_RETRY: Duration = Duration::from_secs(1);

type ConvFuture = Pin<Box<dyn Future<Output = std::thread::Result<Result<Next>>> + Send>>;

/// A conversation in this worker's memory.
struct Active {
    ctx: ConvCtx,
    name: String,
    fut: ConvFuture,
    /// Names this conversation among the worker's, for timers that come due later.
    serial: u64,
    /// How many times it parked; names the wait a timer belongs to.
    park: u64,
    parked: Option<(Park, Instant)>,
    /// A timer job for the current wait is on its way through the chat's queue.
    timer_queued: bool,
    /// A timer job that could not get its turn is tried again no sooner than this.
    timer_retry_at: Instant,
}

impl Active {
    fn deadline(&self) -> Option<(Instant, Timer)> {
        let (park, since) = self.parked?;
        // A duration too large to add is a wait without that timer.
        let timeout =
            park.timeout.and_then(|t| since.checked_add(t)).map(|at| (at, Timer::Timeout));
        let idle = park.idle.and_then(|i| since.checked_add(i).map(|at| (at, Timer::Idle(i))));
        let retry = self.timer_retry_at;
        let (timeout, idle) =
            (timeout.map(|(at, t)| (at.max(retry), t)), idle.map(|(at, t)| (at.max(retry), t)));
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
    /// Jobs queued on this chat and not finished.
    pending: Arc<AtomicUsize>,
    /// The turn held while a job runs, shared with the chat's contexts for fencing.
    turn: Arc<TurnSlot>,
    active: Option<Active>,
    serial: u64,
    seen_chat: bool,
    /// The current job's conversation was cut short with its message's effect held by no
    /// checkpoint: with durability, the message is handed back like a failed one.
    cut: bool,
    /// Set when the message's work failed on a backend or the transport (a store write, a
    /// send, the turn): with durability, the message is handed back instead of acknowledged.
    faulted: bool,
    /// A message kept for a resumed flow's next wait that the flow ended without taking.
    leftover: Option<Message>,
}

impl Worker {
    fn shared(&self) -> &Arc<Shared> {
        &self.disp.shared
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Job>) {
        while let Some(job) = self.next_job(&mut rx).await {
            let message = matches!(job.work, Work::Message(_) | Work::TakeOver { .. });
            // The user code it runs is already guarded; this is the last line, so that a bug
            // here can never leave the chat's turn held or the dispatcher's counts wrong.
            if let Err(panic) = AssertUnwindSafe(self.run_job(job)).catch_unwind().await {
                self.report(BotError::Panic {
                    key: self.key.clone(),
                    message: panic_message(&*panic),
                });
                self.active = None;
                if let (Some(turn), Some(coordination)) =
                    (self.turn.take(), self.shared().coordination.clone())
                {
                    coordination.release(turn, ReleaseOptions::used()).await;
                }
            }
            self.pending.fetch_sub(1, Ordering::SeqCst);
            if message {
                self.disp.done_one();
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

    async fn next_job(&mut self, rx: &mut mpsc::UnboundedReceiver<Job>) -> Option<Job> {
        loop {
            if let Some(active) = &self.active {
                let due = active.deadline().filter(|_| !active.timer_queued);
                let (serial, park) = (active.serial, active.park);
                let Some((when, timer)) = due else { return rx.recv().await };
                tokio::select! {
                    biased;
                    job = rx.recv() => return job,
                    () = tokio::time::sleep_until(when) => {
                        // The timer acts under the chat's turn: it queues behind what is
                        // already queued, and takes its own ticket under coordination.
                        let job = Job::timer(serial, park, timer);
                        if let Some(active) = &mut self.active {
                            active.timer_queued = true;
                        }
                        self.disp.enqueue(&self.key, job);
                        continue;
                    }
                }
            }
            match rx.try_recv() {
                Ok(job) => return Some(job),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            // Nothing here and no conversation: unregister under the map lock unless a job is
            // still on its way (in the ticketer), so that a message arriving now either finds
            // this worker registered or starts a new one.
            {
                let mut chats = lock(&self.disp.chats);
                let registered =
                    chats.get(&self.key).is_some_and(|e| Arc::ptr_eq(&e.pending, &self.pending));
                if registered && self.pending.load(Ordering::SeqCst) == 0 {
                    chats.remove(&self.key);
                    return None;
                }
            }
            return rx.recv().await;
        }
    }

    /// Runs one job under the chat's turn (when coordinated), bounded by `settle`; with
    /// durability, then acknowledges its message or queues it again.
    async fn run_job(&mut self, mut job: Job) {
        let shared = Arc::clone(self.shared());
        if self.disp.handing_back() {
            return self.hand_back_job(job).await;
        }
        if matches!(job.journal, Journal::Pending) {
            // Without coordination there is no ticketer: journal here, before anything runs.
            journal_jobs(&shared, std::slice::from_mut(&mut job)).await;
        }
        job.answer(Ok(()));
        self.turn.set_first_attempt(false);
        let Job { work, ticket, journal, .. } = job;
        let recorded = match (journal, &work) {
            (Journal::Duplicate, Work::Message(m)) => {
                shared.events.emit(Event::Duplicate { key: self.key.clone(), id: m.id.clone() });
                return;
            }
            // Its sender was told to deliver it again.
            (Journal::Refused | Journal::Elsewhere, _) => return,
            // Kept to queue the message again if its effect cannot be stored.
            (Journal::Recorded { id, since, first }, Work::Message(m)) => {
                self.turn.set_first_attempt(first);
                Some(Recorded { id, since, inbound: m.clone() })
            }
            _ => None,
        };
        let Ok(turn) = self.acquire(ticket, &work, recorded.as_ref()).await else { return };
        if let (Some(recorded), Some(held)) = (&recorded, &turn)
            && self.taken_while_stalled(recorded, held).await
        {
            return;
        }
        let changed_hands = turn.as_ref().is_some_and(|(_, t)| t.changed_hands());
        // Unfinished messages of the chat that the grant passed over: those journaled before
        // this turn's own message are handled first, the rest right after it.
        let mut passed = turn.as_ref().map(|(_, t)| t.passed_over().to_vec()).unwrap_or_default();
        let sweep = match &work {
            Work::TakeOver { passed: more } => {
                passed.extend(more.iter().cloned());
                true
            }
            _ => false,
        };
        let left = if shared.durability.is_some() && (sweep || !passed.is_empty()) {
            self.left_over(&passed, recorded.as_ref().map(|r| r.id.as_str())).await
        } else {
            Some(LeftOver::default())
        };
        // Unread (the store failed), what comes first is unknown: hand everything on.
        let unread = left.is_none();
        let LeftOver { before, after, rest, own_gone } = left.unwrap_or_default();
        let recorded = match recorded {
            Some(recorded) if own_gone => {
                // Another holder took this message over while it waited here for its turn.
                let id = recorded.inbound.id;
                shared.events.emit(Event::Duplicate { key: self.key.clone(), id });
                None
            }
            recorded => recorded,
        };
        for record in &rest {
            self.release_record(&record.id, &record.owner).await;
        }
        let mut used = !before.is_empty();
        let mut lost = unread || self.take_over(before, changed_hands).await;
        // Interrupted (the turn lost) rather than failed: the message is not to blame.
        let mut interrupted = lost;
        if !lost {
            if !own_gone {
                used |= self.bounded(work, changed_hands && !used).await;
            }
            // Lost mid-way (this replica stalled past its lease), failed on a backend, or cut
            // with an answer no checkpoint holds: what it did may not have reached anyone, or
            // may not be stored. The next holder takes it over, before anything later.
            interrupted = turn.as_ref().is_some_and(|(_, t)| t.check().is_err());
            lost = interrupted || ((self.faulted || self.cut) && recorded.is_some());
        }
        // Acknowledged only once a checkpoint holds the message's effect.
        let mut ack = match recorded {
            Some(r) if lost => {
                self.give_back(&r.inbound, &r.id, !interrupted).await;
                None
            }
            Some(r) => {
                let mut failures = lock(&self.disp.failures);
                if !failures.is_empty() {
                    failures.remove(&r.id);
                }
                Some(r.id)
            }
            None => None,
        };
        if !after.is_empty() {
            if lost {
                for record in &after {
                    self.release_record(&record.id, &record.owner).await;
                }
            } else {
                if let Some(id) = ack.take() {
                    durable::acknowledge(&shared, &self.key, &id).await;
                }
                lost = self.take_over(after, false).await;
                used = true;
            }
        }
        let hand_back = lost || !rest.is_empty();
        self.finish(turn, ack, used, hand_back).await;
    }

    /// Hands back a job a stopping bot has no time left for: its ticket is withdrawn and its
    /// journaled message released, so the chat's next holder (on another replica) takes it
    /// over first. A message without the journal is reported as not handled; a sender still
    /// waiting in [`Dispatcher::accept`] is told to deliver it again.
    async fn hand_back_job(&mut self, mut job: Job) {
        if let Some(tx) = job.accepted.take() {
            let _ = tx.send(Err(BotError::NotRunning));
        }
        let Job { work, ticket, journal, .. } = job;
        match journal {
            Journal::Recorded { id, .. } => self.not_run(&work, Some(&id)).await,
            Journal::Off | Journal::Pending => self.not_run(&work, None).await,
            // Its sender delivers it again, or another replica has it.
            Journal::Duplicate | Journal::Refused | Journal::Elsewhere => {}
        }
        if let (Some(Ok(ticket)), Some(coordination)) = (ticket, &self.shared().coordination) {
            coordination.withdraw(ticket).await;
        }
    }

    /// Leaves a job's message to the chat's next holder: released when it is journaled under
    /// `id`, else reported as not handled (nothing keeps it).
    async fn not_run(&mut self, work: &Work, id: Option<&str>) {
        match (id, work) {
            (Some(id), _) => self.hand_back(id).await,
            (None, Work::Message(m)) => {
                self.report(BotError::Unhandled { key: self.key.clone(), id: m.id.clone() });
            }
            (None, Work::Timer { .. } | Work::TakeOver { .. }) => {}
        }
    }

    /// Waits for the job's turn under coordination (`Ok(None)` without it) and makes it the
    /// chat's current one, dropping a conversation held in memory if another replica had the
    /// chat since. `Err` when the turn could not be had: the job's message is handed back, a
    /// timer is tried again later, and the error is reported.
    async fn acquire(
        &mut self,
        ticket: Option<Result<Ticket, Error>>,
        work: &Work,
        recorded: Option<&Recorded>,
    ) -> Result<Option<Held>, ()> {
        let shared = Arc::clone(self.shared());
        let (Some(ticket), Some(coordination)) = (ticket, &shared.coordination) else {
            return Ok(None);
        };
        let acquired = match ticket {
            Ok(ticket) => tokio::select! {
                acquired = coordination.acquire(ticket.clone()) => acquired,
                // A stopping bot that ran out of time does not wait for turns any more.
                () = self.disp.handing_back_now() => {
                    coordination.withdraw(ticket).await;
                    self.not_run(work, recorded.map(|r| r.id.as_str())).await;
                    return Err(());
                }
            },
            Err(e) => Err(e),
        };
        let turn = match acquired {
            Ok(turn) => turn,
            Err(e) => {
                if let Some(recorded) = recorded {
                    // Not the message's fault: no attempt is counted. The ticket was withdrawn
                    // naming this replica, so the next holder takes it.
                    self.hand_back(&recorded.id).await;
                }
                if let (Work::Timer { serial, .. }, Some(active)) = (work, self.active.as_mut())
                    && active.serial == *serial
                {
                    // Try the timer again later instead of losing it.
                    active.timer_queued = false;
                    active.timer_retry_at = Instant::now() + TIMER_RETRY;
                }
                self.report(e.into());
                return Err(());
            }
        };
        self.turn.set(Some(Arc::clone(&turn)));
        if turn.changed_hands() {
            // Another replica handled the chat since we last did: what we hold in memory is
            // stale. The store has the current state.
            if let Some(active) = self.active.take() {
                shared.events.emit(Event::Handover {
                    key: self.key.clone(),
                    name: active.name.clone(),
                    outcome: HandoverOutcome::Dropped,
                });
                self.end(active, EndReason::LeaseLost).await;
            }
        }
        Ok(Some((Arc::clone(coordination), turn)))
    }

    /// Whether this replica stalled since `recorded` was journaled and the replica that took
    /// the chat over took the message too; if so, the turn `held` is given back unused, with
    /// what its grant passed over passed on to the next holder, unread.
    async fn taken_while_stalled(&mut self, recorded: &Recorded, held: &Held) -> bool {
        let (coordination, turn) = held;
        if coordination.given_up_at().is_none_or(|at| at <= recorded.since)
            || self.still_ours(&recorded.id).await
        {
            return false;
        }
        self.turn.set(None);
        let options = if turn.passed_over().is_empty() {
            ReleaseOptions::unused()
        } else {
            ReleaseOptions::unused().handing_back()
        };
        coordination.release(Arc::clone(turn), options).await;
        true
    }

    /// Acknowledges `ack` and gives the turn back (`used`, or `hand_back` what this turn could
    /// not finish) at once: the next holder may start while the acknowledgement is on the wire.
    async fn finish(
        &mut self,
        turn: Option<Held>,
        ack: Option<String>,
        used: bool,
        hand_back: bool,
    ) {
        let shared = Arc::clone(self.shared());
        let (retain, slot, key) = (self.waiting_for(), Arc::clone(&self.turn), self.key.clone());
        let ack = async {
            if let Some(id) = ack {
                durable::acknowledge(&shared, &key, &id).await;
            }
        };
        let release = async move {
            if let Some((coordination, turn)) = turn {
                slot.set(None);
                let options = if used { ReleaseOptions::used() } else { ReleaseOptions::unused() };
                let options = if hand_back { options.handing_back() } else { options };
                coordination.release(turn, options.retain(retain)).await;
            }
        };
        tokio::join!(ack, release);
    }

    /// Runs `work`, bounded by `settle` under coordination; returns whether it did anything.
    async fn bounded(&mut self, work: Work, changed_hands: bool) -> bool {
        let settle = self.shared().coordination.as_ref().map(|c| c.settle());
        self.cut = false;
        self.faulted = false;
        let Some(settle) = settle else { return self.work(work, changed_hands).await };
        let (slot, disp) = (Arc::clone(&self.turn), Arc::clone(&self.disp));
        slot.set_cut(false);
        let finished = {
            let run = self.work(work, changed_hands);
            tokio::pin!(run);
            tokio::select! {
                used = &mut run => Some(used),
                () = async {
                    tokio::select! {
                        () = tokio::time::sleep(settle) => {}
                        () = disp.handing_back_now() => {}
                    }
                } => {
                    // Cut short: nothing new may start under the turn. A send or checkpoint
                    // write already on the wire finishes first (bounded by `settle` again), so
                    // it cannot land after the next holder started.
                    slot.set_cut(true);
                    let on_the_wire = async {
                        tokio::select! {
                            // It ended on its own meanwhile, and saw the cut.
                            used = &mut run => Some(used),
                            () = slot.effects_done() => None,
                        }
                    };
                    tokio::time::timeout(settle, on_the_wire).await.ok().flatten()
                }
            }
        };
        if finished.is_none() {
            match self.active.take() {
                // The step outlived `settle`: stop it, keeping its checkpoint, before the turn
                // goes to whoever is next.
                Some(active) => self.end(active, EndReason::Suspended).await,
                // A handler or a hook did not finish: its message is not done.
                None => self.cut = true,
            }
        }
        finished.unwrap_or(true)
    }

    /// The chat's journaled messages left unfinished by the incarnations a grant passed over
    /// (dead ones, or any that released a message it could not finish), in journal order:
    /// those before the turn's own message `own`, and those after it. `None` when the journal
    /// could not be read.
    async fn left_over(&mut self, passed: &[String], own: Option<&str>) -> Option<LeftOver> {
        /// The most messages taken over at once; the rest go to the periodic replay (or a
        /// later holder).
        const LIMIT: usize = 100;
        let shared = Arc::clone(self.shared());
        let records = match shared.store.inbox_pending_for(self.key.as_str(), LIMIT).await {
            Ok(records) => records,
            Err(e) => {
                self.report(e.into());
                return None;
            }
        };
        let listed = own.is_some_and(|own| records.iter().any(|r| r.id == own));
        // The own message's record: from the listing, or read on its own when the listing does
        // not show it (acknowledged meanwhile, or past the records the listing returned).
        let own_record = match own {
            Some(own) if listed => records.iter().find(|r| r.id == own).cloned(),
            Some(own) => match shared.store.inbox_get(own).await {
                Ok(record) => record.filter(|r| r.state == InboxState::Pending),
                Err(e) => {
                    self.report(e.into());
                    return None;
                }
            },
            None => None,
        };
        // Released while its job waited for the turn (this replica was passed over): the job
        // takes it back, unless another holder claimed it first.
        let mut own_taken_back = false;
        if let Some(record) = own_record.as_ref().filter(|r| r.owner == durable::RELEASED) {
            match shared.store.inbox_claim(&record.id, durable::RELEASED, &shared.owner).await {
                Ok(claimed) => own_taken_back = claimed,
                Err(e) => {
                    self.report(e.into());
                    return None;
                }
            }
        }
        // Pending and ours but not listed: the listing stopped short of it, so everything it
        // shows comes first. Otherwise what it shows is all there is.
        let ours = own_record.is_some_and(|r| r.owner == shared.owner || own_taken_back);
        let complete = listed || !ours;
        Some(sort_left_over(records, passed, own, &shared.owner, own_taken_back, complete))
    }

    /// Claims and handles `records` under the turn held now, acknowledging each. Returns
    /// `true` when the turn was lost on the way: what is left is released again for the next
    /// holder.
    async fn take_over(&mut self, records: Vec<InboxRecord>, changed_hands: bool) -> bool {
        let shared = Arc::clone(self.shared());
        let mut changed_hands = changed_hands;
        let mut records = records.into_iter();
        while let Some(record) = records.next() {
            if self.turn.check().is_err() {
                // Lost: what is left is released for the next holder.
                self.release_record(&record.id, &record.owner).await;
                for record in records {
                    self.release_record(&record.id, &record.owner).await;
                }
                return true;
            }
            let inbound = match durable::claim(&shared, &record).await {
                Claim::Claimed(inbound) => inbound,
                Claim::Gone => continue,
                // Someone else has it, and may be handling it now: nothing after it in the
                // journal may go first. The rest is released for a later holder.
                Claim::Held => {
                    for record in records {
                        self.release_record(&record.id, &record.owner).await;
                    }
                    return true;
                }
            };
            self.turn.set_first_attempt(false);
            self.bounded(Work::Message(inbound.clone()), changed_hands).await;
            changed_hands = false;
            let stalled = self.turn.check().is_err();
            if stalled || self.faulted || self.cut {
                self.give_back(&inbound, &record.id, !stalled).await;
                for record in records {
                    self.release_record(&record.id, &record.owner).await;
                }
                return true;
            }
            durable::acknowledge(&shared, &self.key, &record.id).await;
        }
        false
    }

    /// Whether journaled message `id` is still pending and this replica's, taking it back if
    /// it was released meanwhile (an append this replica gave up on, found landed). A store
    /// error counts as yes: handling a message twice beats losing it.
    async fn still_ours(&mut self, id: &str) -> bool {
        let shared = Arc::clone(self.shared());
        match shared.store.inbox_get(id).await {
            Ok(Some(r)) if r.state == InboxState::Pending && r.owner == durable::RELEASED => {
                match shared.store.inbox_claim(id, durable::RELEASED, &shared.owner).await {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.report(e.into());
                        true
                    }
                }
            }
            Ok(Some(r)) => r.state == InboxState::Pending && r.owner == shared.owner,
            Ok(None) => false,
            Err(e) => {
                self.report(e.into());
                true
            }
        }
    }

    /// Releases a journaled message this replica could not finish under a turn: the next
    /// holder of the chat takes it over before its own (its grant names this replica), or,
    /// if the chat stays quiet, the periodic replay does. While the store cannot be written,
    /// this is retried in the background.
    async fn hand_back(&mut self, id: &str) {
        let owner = self.shared().owner.clone();
        self.release_record(id, &owner).await;
    }

    /// Gives back a journaled message this replica could not finish: handed back for the next
    /// holder, unless its handling `failed` on a backend or the transport for the
    /// `max_attempts`-th time here, which gives up on it (reported, acknowledged).
    async fn give_back(&mut self, inbound: &Inbound, id: &str, failed: bool) {
        let max = self.shared().durability.as_ref().map_or(1, |d| d.max_attempts);
        let failures = if failed {
            let mut failures = lock(&self.disp.failures);
            let n = failures.entry(id.to_owned()).or_insert(0);
            *n += 1;
            *n
        } else {
            0
        };
        if failures < max {
            return self.hand_back(id).await;
        }
        lock(&self.disp.failures).remove(id);
        self.report(BotError::GaveUp {
            key: self.key.clone(),
            id: inbound.id.clone(),
            attempts: max,
        });
        let shared = Arc::clone(self.shared());
        durable::acknowledge(&shared, &self.key, id).await;
    }

    /// Releases journaled message `id`, owned by `from`, for the chat's next holder (see
    /// [`Worker::hand_back`]).
    async fn release_record(&mut self, id: &str, from: &str) {
        let shared = Arc::clone(self.shared());
        durable::release(&shared, &self.key, id, from).await;
    }

    /// How long the chat's in-memory conversation may still wait for an answer: its wait
    /// timeout, or a day when it has none.
    fn waiting_for(&self) -> Option<Duration> {
        const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
        let (park, _) = self.active.as_ref()?.parked?;
        Some(park.timeout.unwrap_or(NO_TIMEOUT))
    }

    /// Runs the work; returns whether it did anything (a stale timer does not).
    async fn work(&mut self, work: Work, changed_hands: bool) -> bool {
        match work {
            Work::Message(inbound) => {
                let span = tracing::debug_span!("message", id = %inbound.id);
                self.on_message(inbound, changed_hands).instrument(span).await;
                true
            }
            Work::Timer { serial, park, timer } => self.on_timer(serial, park, timer).await,
            // Done before the job's own work, by `take_over`.
            Work::TakeOver { .. } => false,
        }
    }

    async fn on_message(&mut self, inbound: Inbound, changed_hands: bool) {
        let shared = Arc::clone(self.shared());
        let id = inbound.id.clone();
        if !self.seen_chat {
            self.seen_chat = true;
            let record = ChatRecord::new(inbound.chat.clone(), inbound.provider.clone(), now_ms());
            if let Err(e) = shared.store.upsert_chat(&record).await {
                self.report(e.into());
            }
        }
        let Some(msg) = self.run_hooks(Message::new(inbound)).await else { return };
        // Only a chat that may have something in the store costs a read: persistent flows,
        // hand-over writes, or another replica (or process) having held the chat.
        let reads = shared.has_persistent || shared.handover.writes_anything() || changed_hands;
        let found = match self.active {
            None if reads => self.load_checkpoint(&msg).await,
            _ => None,
        };
        match self.exit_for(&msg, found.as_ref()) {
            Some(Exit::Cancel) => self.cancel(&msg, found).await,
            Some(Exit::Interrupt(def)) => self.interrupt(msg, found, def).await,
            None => self.answer(msg, found, changed_hands).await,
        }
        while let Some(kept) = self.leftover.take() {
            self.route(kept).await;
        }
        shared.events.emit(Event::Handled { key: self.key.clone(), id });
    }

    /// Gives the message to the waiting conversation (in memory, or resumed from what the
    /// store holds), else routes it.
    async fn answer(&mut self, msg: Message, found: Option<Found>, changed_hands: bool) {
        let shared = Arc::clone(self.shared());
        if let Some(active) = self.active.as_mut() {
            active.parked = None;
            active.ctx.link().deliver(Input::Message(msg));
            self.drive().await;
        } else {
            match found {
                Some(Found::Resume { def, resume, revision }) => {
                    if changed_hands {
                        shared.events.emit(Event::Handover {
                            key: self.key.clone(),
                            name: def.name().to_owned(),
                            outcome: HandoverOutcome::Continued,
                        });
                    }
                    // A replica that does not forward still resumes an ephemeral checkpoint
                    // once, and clears it.
                    let unforwarded = resume.ephemeral
                        && matches!(&def, Def::Flow(f) if !f.persistent)
                        && shared.handover.flows != FlowHandover::Forward;
                    self.install(def, msg, Some((*resume, revision)));
                    if unforwarded && let Some(active) = &self.active {
                        let cleared = active.ctx.clear_checkpoint().await;
                        if let Err(e) = cleared {
                            self.report(e);
                        }
                    }
                    self.drive().await;
                }
                Some(Found::Fallback { name, reason, state, revision }) => {
                    if let Some(msg) = self.fallback(msg, name, reason, state, revision).await {
                        self.route(msg).await;
                    }
                }
                None => self.route(msg).await,
            }
        }
    }

    /// Routes a message no conversation waits for: a trigger, else the handlers.
    async fn route(&mut self, msg: Message) {
        let shared = Arc::clone(self.shared());
        if let Some(def) =
            shared.triggered.iter().find(|d| d.triggers().iter().any(|t| t.matches(&msg)))
        {
            self.install(def.clone(), msg, None);
            self.drive().await;
        } else {
            self.run_handlers(msg).await;
        }
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
        for (slot, handler) in shared.handlers.iter().enumerate() {
            let ctx =
                Ctx::new(Arc::clone(&shared), Arc::clone(&self.turn), msg.clone(), Some(slot));
            match AssertUnwindSafe(handler(ctx.clone())).catch_unwind().await {
                Ok(Ok(())) => {}
                // Cut short under it: its message is not done, and the handler is not to blame.
                Ok(Err(_)) if self.turn.is_cut() => self.cut = true,
                // The turn was lost under it, which was reported when it happened; the message
                // goes to the next holder.
                Ok(Err(source)) => {
                    let error = BotError::Handler { key: self.key.clone(), source };
                    // A lost turn was reported when it happened; the message goes to the next
                    // holder. A backend or the transport failing is not the handler's logic:
                    // with durability the message is handed back instead of acknowledged.
                    if error.kind() != Some(ErrorKind::LeaseLost) {
                        self.faulted |= error.recovery() != Recovery::Fail;
                        self.report(error);
                    }
                }
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

    fn install(&mut self, def: Def, msg: Message, resume: Option<(Resume, u64)>) {
        let shared = Arc::clone(self.shared());
        let name = def.name().to_owned();
        let ctx = ConvCtx::new(
            shared.clone(),
            Arc::new(Link::default()),
            Arc::clone(&self.turn),
            msg,
            name.clone(),
            def.timeout(),
        );
        let resumed = resume.is_some();
        let resume = resume.map(|(mut resume, revision)| {
            ctx.adopt_checkpoint(revision);
            if let Some(kept) = resume.kept.take() {
                ctx.link().deliver(Input::Message(kept));
            }
            resume
        });
        shared.events.emit(Event::ConversationStarted {
            key: self.key.clone(),
            name: name.clone(),
            resumed,
        });
        let fut = AssertUnwindSafe(runner::run(ctx.clone(), def, resume)).catch_unwind();
        self.serial += 1;
        self.active = Some(Active {
            ctx,
            name,
            fut: Box::pin(fut),
            serial: self.serial,
            park: 0,
            parked: None,
            timer_queued: false,
            timer_retry_at: Instant::now(),
        });
    }

    /// Runs the active conversation until it waits again or ends, following `goto`s.
    async fn drive(&mut self) {
        while let Some(active) = self.active.as_mut() {
            let out = match (DriveUntilParked { active: &mut *active }).await {
                Driven::Parked(park) => {
                    active.park += 1;
                    active.parked = Some((park, Instant::now()));
                    active.timer_queued = false;
                    return;
                }
                Driven::Exited(out) => out,
            };
            let Some(active) = self.active.take() else { return };
            if self.turn.is_cut() {
                // Cut short while it ran: whatever it returned, it stops where its checkpoint
                // says, for whoever holds the chat next.
                self.end(active, EndReason::Suspended).await;
                return;
            }
            if let Some(kept) = active.ctx.link().take_message() {
                self.leftover = Some(kept);
            }
            match out {
                Ok(Ok(Next::End)) => {
                    let msg = active.ctx.message();
                    self.end(active, EndReason::Completed).await;
                    // A flow this one interrupted comes back, and is driven next.
                    self.resume_aside(msg).await;
                }
                Ok(Ok(Next::Start(name))) => {
                    let msg = active.ctx.message();
                    self.end(active, EndReason::Replaced).await;
                    match self.shared().defs.get(&name).cloned() {
                        Some(def) => self.install(def, msg, None),
                        None => self.report(BotError::UnknownConversation { name }),
                    }
                }
                Ok(Err(BotError::Idle { .. })) => self.end(active, EndReason::Idle).await,
                Ok(Err(BotError::Contract(Error::LeaseLost { key, reason }))) => {
                    // A refused compare-and-set is news; a stalled turn the coordination runtime
                    // reported when it gave it up. One loss, one event.
                    if reason == LeaseLostReason::Superseded {
                        self.shared().events.emit(Event::LeaseLost { key, reason });
                    }
                    self.end(active, EndReason::LeaseLost).await;
                }
                Ok(Err(e)) => {
                    let recovery = e.recovery();
                    self.report(e);
                    if recovery == Recovery::Fail {
                        self.end(active, EndReason::Failed).await;
                    } else {
                        // A store or the transport failed under the step, or the transport
                        // went away (a stop, a step-down), not the step's own logic: it stays
                        // where its checkpoint says, and with durability the message is handed
                        // back to run it again.
                        self.faulted = true;
                        self.end(active, EndReason::Suspended).await;
                    }
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

    async fn on_timer(&mut self, serial: u64, park: u64, timer: Timer) -> bool {
        let current = self
            .active
            .as_ref()
            .is_some_and(|a| a.serial == serial && a.park == park && a.parked.is_some());
        if !current {
            // The conversation moved on (an answer came, it ended, or it was stale and dropped)
            // since the timer came due.
            return false;
        }
        match timer {
            Timer::Timeout => {
                let Some(active) = self.active.take() else { return false };
                let text = active.ctx.text(keys::TIMEOUT);
                if let Err(e) = active.ctx.send(text).await {
                    self.report(e);
                }
                self.end(active, EndReason::Timeout).await;
            }
            Timer::Idle(after) => {
                let Some(active) = self.active.as_mut() else { return false };
                active.parked = None;
                active.ctx.link().deliver(Input::Idle(after));
                self.drive().await;
            }
        }
        true
    }

    async fn end(&mut self, active: Active, reason: EndReason) {
        // Dropping the future first stops whatever the conversation was doing.
        let Active { ctx, name, fut, .. } = active;
        drop(fut);
        if matches!(reason, EndReason::Suspended | EndReason::LeaseLost) && !ctx.holds_input() {
            // The message being handled changed this conversation and no checkpoint holds that.
            self.cut = true;
        }
        let keeps_checkpoint =
            matches!(reason, EndReason::Stopped | EndReason::Suspended | EndReason::LeaseLost);
        if !keeps_checkpoint && let Err(e) = ctx.clear_checkpoint().await {
            // A lost turn was reported when it was lost; the newer owner's row stays.
            if e.as_contract().is_none_or(|e| e.kind() != ErrorKind::LeaseLost) {
                self.report(e);
            }
        }
        // Clones of the context held elsewhere (a spawned task) may not act for it any more.
        ctx.mark_ended();
        self.discard_aside(reason).await;
        self.shared().events.emit(Event::ConversationEnded { key: self.key.clone(), name, reason });
    }

    fn report(&self, error: BotError) {
        self.shared().events.error(Some(&self.key), error);
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pending record `id` owned by `owner`.
    fn rec(id: &str, owner: &str) -> InboxRecord {
        InboxRecord::pending(id, "c", "{}", owner)
    }

    fn ids(records: &[InboxRecord]) -> Vec<&str> {
        records.iter().map(|r| r.id.as_str()).collect()
    }

    /// `(before, after, rest, own_gone)` for a journal of `records` sorted by replica `me`.
    fn sort(
        records: &[InboxRecord],
        own: Option<&str>,
        taken_back: bool,
        complete: bool,
    ) -> (Vec<String>, Vec<String>, Vec<String>, bool) {
        let passed = ["dead".to_owned()];
        let left = sort_left_over(records.to_vec(), &passed, own, "me", taken_back, complete);
        let owned = |r: &[InboxRecord]| ids(r).into_iter().map(str::to_owned).collect();
        (owned(&left.before), owned(&left.after), owned(&left.rest), left.own_gone)
    }

    const R: &str = durable::RELEASED;

    #[test]
    fn a_message_queued_elsewhere_before_the_own_one_is_done_and_blocks_nothing() {
        let journal = [rec("q", "live"), rec("r1", R), rec("own", "me"), rec("r2", "dead")];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert_eq!(
            (before, after, rest, gone),
            (vec!["r1".into()], vec!["r2".into()], vec![], false)
        );
    }

    #[test]
    fn what_follows_a_message_queued_elsewhere_after_the_own_one_waits() {
        let journal = [rec("own", "me"), rec("r1", R), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert_eq!(
            (before, after, rest, gone),
            (vec![], vec!["r1".into()], vec!["r2".into()], false)
        );
    }

    #[test]
    fn a_takeover_takes_nothing_past_a_message_still_queued_on_a_live_replica() {
        let journal = [rec("r1", R), rec("d", "dead"), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, None, false, true);
        assert_eq!(before, ["r1", "d"]);
        assert!(after.is_empty() && !gone);
        assert_eq!(rest, ["r2"]);
    }

    #[test]
    fn an_own_message_handled_elsewhere_meanwhile_is_gone_and_the_turn_sorts_as_a_takeover() {
        let journal = [rec("r1", R), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone, "acknowledged by another holder");
        assert_eq!((before, after, rest), (vec!["r1".into()], vec![], vec!["r2".into()]));
        // Past the listing's limit, the own message is further on: all of these come first.
        let (before, _, rest, gone) = sort(&journal, Some("own"), false, false);
        assert!(!gone);
        assert_eq!((before, rest), (vec!["r1".into(), "r2".into()], vec![]));
    }

    #[test]
    fn an_own_message_another_holder_claimed_is_gone_and_what_follows_it_waits() {
        let journal = [rec("r1", R), rec("own", "other"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone);
        assert_eq!((before, after, rest), (vec!["r1".into()], vec![], vec!["r2".into()]));
    }

    #[test]
    fn a_hand_back_naming_this_replica_leaves_its_own_queued_messages_to_their_jobs() {
        // The grant after this replica's own hand-back names it: its messages still queued
        // here with their tickets are not taken over, and what follows them waits.
        let journal = [rec("r1", R), rec("mine", "me"), rec("r2", R)];
        let passed = ["me".to_owned()];
        let left = sort_left_over(journal.to_vec(), &passed, None, "me", false, true);
        assert_eq!(ids(&left.before), ["r1"]);
        assert!(left.after.is_empty());
        assert_eq!(ids(&left.rest), ["r2"]);
    }

    #[test]
    fn an_own_message_released_and_taken_back_is_handled_in_its_place() {
        let journal = [rec("r1", R), rec("own", R), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), true, true);
        assert!(!gone);
        assert_eq!((before, after, rest), (vec!["r1".into()], vec!["r2".into()], vec![]));
        let (_, _, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone, "another holder claimed it first");
        assert_eq!(rest, ["r2"]);
    }
}
