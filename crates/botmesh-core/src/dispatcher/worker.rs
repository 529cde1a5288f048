//! The worker: one task per chat that runs the chat's jobs one at a time. For each job it
//! waits for the chat's turn (under coordination), runs what the turn's run hands it (what
//! other replicas left, and the job's own work), each bounded by `settle`, and finishes the
//! run, which acknowledges or hands back and gives the turn back. The work itself is routing
//! (`route.rs`) and driving the conversation (`conversation.rs`).

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use botmesh_traits::{ChatKey, Error, MessageId, ReleaseOptions, Ticket};
use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tracing::{Instrument, Span};

use super::conversation::Active;
use super::job::{Held, Job, Journal, TIMER_RETRY, Work};
use super::ticketer::journal_jobs;
use super::{Dispatcher, lock, panic_message};
use crate::coordination::{Item, Local, Outcome, Own, Recorded, TurnRun, TurnSlot};
use crate::shared::Shared;
use crate::{BotError, Ctx, EndReason, Event, HandoverOutcome, Message, Result};
use crate::{durable, outbox};

/// How long a worker with nothing queued and no conversation waits for its chat's next job
/// before it ends. An idle worker costs a parked task and its queues (its job futures are
/// boxed, so little memory); a new one costs a task, its queues, and the chat's first-message
/// work, which for a chat writing every few seconds would be paid on every message.
const LINGER: Duration = Duration::from_secs(5);

/// No job came within [`LINGER`].
#[derive(Debug)]
struct Idle;

/// A chat's worker task: its queue's receiving end, the turn it holds while a job runs, and
/// the chat's conversation in this replica's memory.
pub(super) struct Worker {
    pub(super) disp: Arc<Dispatcher>,
    pub(super) key: ChatKey,
    /// Jobs queued on this chat and not finished.
    pub(super) pending: Arc<AtomicUsize>,
    /// The turn held while a job runs, shared with the chat's contexts for fencing.
    pub(super) turn: Arc<TurnSlot>,
    pub(super) active: Option<Active>,
    pub(super) serial: u64,
    pub(super) seen_chat: bool,
    /// What the work running now came to so far; taken by [`Worker::bounded`] when it ends.
    pub(super) outcome: Outcome,
    /// A message kept for a resumed flow's next wait that the flow ended without taking.
    pub(super) leftover: Option<Message>,
    /// An error was reported while the work running now ran.
    pub(super) failed: AtomicBool,
    /// The message being handled now, which the errors reported meanwhile belong to.
    pub(super) current: Option<MessageId>,
}

impl Worker {
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.disp.shared
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Box<Job>>) {
        // The worker's one lingering timer (see `Worker::linger`).
        let mut timer = std::pin::pin!(tokio::time::sleep(LINGER));
        while let Some(job) = self.next_job(&mut rx, timer.as_mut()).await {
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
                    // Boxed, like the end below: rare paths, which the worker's task (kept
                    // while the chat lingers) should not carry room for.
                    Box::pin(coordination.release(turn, ReleaseOptions::used())).await;
                }
            }
            self.pending.fetch_sub(1, Ordering::SeqCst);
            if message {
                self.disp.done_one();
            }
        }
        if let Some(active) = self.active.take() {
            // The bot is stopping: the conversation ends here, its checkpoint stays.
            Box::pin(self.end(active, EndReason::Stopped)).await;
        }
        if self.disp.workers.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.disp.workers_done.notify_waiters();
        }
    }

    pub(super) async fn next_job(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Box<Job>>,
        mut timer: Pin<&mut Sleep>,
    ) -> Option<Box<Job>> {
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
            // Nothing queued and no conversation: a chat that writes again soon (a user's
            // next line, a busy group) reuses this worker for a while rather than paying for a
            // new one (a task, its queues and the chat's first-message work) per message.
            if let Ok(job) = Self::linger(rx, timer.as_mut()).await {
                return job;
            }
            // Still nothing: unregister under the map lock unless a job is still on its way
            // (in the ticketer), so that a message arriving now either finds this worker
            // registered or starts a new one.
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

    /// Waits for the next job (`None`: the queue closed) for at most [`LINGER`]. The timer is
    /// the worker's own, armed once: a wait that ends with a job leaves it set, and only one
    /// that finds it fired early (a wait begun since it was set) sets it again. A timer armed
    /// and taken out of the runtime's timer wheel for every wait cost a busy chat's worker
    /// more than the rest of its wait.
    async fn linger(
        rx: &mut mpsc::UnboundedReceiver<Box<Job>>,
        mut timer: Pin<&mut Sleep>,
    ) -> Result<Option<Box<Job>>, Idle> {
        let due = Instant::now() + LINGER;
        loop {
            tokio::select! {
                biased;
                job = rx.recv() => return Ok(job),
                () = timer.as_mut() => {
                    if Instant::now() >= due {
                        return Err(Idle);
                    }
                    timer.as_mut().reset(due);
                }
            }
        }
    }

    /// Runs one job under the chat's turn (when coordinated), bounded by `settle`, in its
    /// message's span. The turn's run says what to handle, in the chat's journal order (what
    /// other replicas left, and the job's own work), and finishes the job's message
    /// (acknowledged or handed back) with the turn.
    pub(super) async fn run_job(&mut self, mut job: Box<Job>) {
        let span = std::mem::replace(&mut job.span, Span::none());
        // Boxed: a job's future is large, and an idle worker (see `LINGER`) should not carry
        // room for one, nor move it (into the span, the unwind guard, the task) at each job.
        Box::pin(self.run_job_in(job, &span)).instrument(span.clone()).await;
    }

    async fn run_job_in(&mut self, mut job: Box<Job>, span: &Span) {
        let shared = Arc::clone(self.shared());
        if self.disp.handing_back() {
            span.record("outcome", "handed_back");
            // Boxed, like the other rare paths below: the job's future stays the size of the
            // common one.
            return Box::pin(self.hand_back_job(*job)).await;
        }
        if matches!(job.journal, Journal::Pending) {
            // Without coordination there is no ticketer: journal here, before anything runs.
            Box::pin(journal_jobs(&shared, &self.key, std::slice::from_mut(&mut job))).await;
        }
        job.answer(Ok(()));
        self.turn.set_fresh(None);
        let Job { work, ticket, journal, .. } = *job;
        let mut first = false;
        let own = match (journal, &work) {
            (Journal::Duplicate, Work::Message(m)) => {
                span.record("outcome", "duplicate");
                shared.meters.provider(&m.provider).deduplicated.increment(1);
                shared.events.emit(Event::Duplicate { key: self.key.clone(), id: m.id.clone() });
                return;
            }
            // Its sender was told to deliver it again.
            (Journal::Refused | Journal::Elsewhere, _) => {
                span.record("outcome", "refused");
                return;
            }
            // Its record is acknowledged once the message is handled, or given back to the
            // journal for the chat's next holder.
            (Journal::Recorded { id, since, first: f }, Work::Message(m)) => {
                first = f;
                Own::Journaled(Recorded { id, since, message: m.id.clone() })
            }
            (_, Work::TakeOver { .. }) => Own::Nothing,
            _ => Own::Unjournaled,
        };
        let id = match &own {
            Own::Journaled(recorded) => Some(recorded.id.clone()),
            _ => None,
        };
        let waited = Instant::now();
        let wait = tracing::debug_span!(target: "botmesh", "turn.wait");
        let Ok(held) = self.acquire(ticket, &work, id.as_deref()).instrument(wait).await else {
            span.record("outcome", "handed_back");
            return;
        };
        let held_since = Instant::now();
        let under_turn = held.is_some();
        if let Some((_, turn)) = &held {
            shared.meters.turn_wait.record(held_since.duration_since(waited));
            span.record("fence", turn.fence());
        }
        let sweep = match &work {
            Work::TakeOver { passed } => passed.clone(),
            _ => Vec::new(),
        };
        let journal = self.disp.journal();
        // One process runs its work on the stack; a coordinated turn's run comes boxed.
        let (mut local, mut coordinated);
        let run: &mut dyn TurnRun = match held {
            Some((coordination, turn)) => {
                match coordination.begin(turn, own, sweep, journal).await {
                    Some(run) => {
                        coordinated = run;
                        coordinated.as_mut()
                    }
                    // Taken over elsewhere while this replica stalled; the turn went back.
                    None => return self.turn.set(None),
                }
            }
            None => {
                local = Local::new(self.key.clone(), own, journal);
                &mut local
            }
        };
        let mut work = Some(work);
        let mut fresh = id.filter(|_| first);
        while let Some(item) = run.next().await {
            match item {
                Item::TakenOver { taken, changed_hands } => {
                    // A message of its own, with a span of its own, linked to where it arrived.
                    let taken_span = self.disp.taken_span(&taken);
                    if let Some(fence) = self.turn.fence() {
                        taken_span.record("fence", fence);
                    }
                    self.turn.set_fresh(None);
                    let work = Work::Message(taken.inbound);
                    let outcome = self
                        .handle(work, changed_hands, &taken_span)
                        .instrument(taken_span.clone())
                        .await;
                    run.done(outcome).instrument(taken_span).await;
                }
                Item::Own { changed_hands } => {
                    self.turn.set_fresh(fresh.take());
                    let outcome = match work.take() {
                        Some(work) => self.handle(work, changed_hands, span).await,
                        None => Outcome::default(),
                    };
                    run.done(outcome).await;
                }
            }
        }
        let retain = self.waiting_for();
        let fence = self.turn.fence();
        // Nothing new may act under the turn from here on: it goes back.
        self.turn.set(None);
        run.finish(retain).instrument(tracing::debug_span!(target: "botmesh", "finish")).await;
        shared.events.emit(Event::Finished { key: self.key.clone(), fence });
        if under_turn {
            shared.meters.turn_hold.record(held_since.elapsed());
        }
    }

    /// Runs `work` in a `handle` span, bounded like [`Worker::bounded`], and counts a message
    /// that failed; `span` is the message's. With durability, the outbox marks its handlers
    /// kept are written while it runs long, and at its end unless it ended cleanly (see
    /// `outbox.rs`). Not an `async fn`: see [`Worker::work`].
    #[expect(clippy::manual_async_fn, reason = "an `async fn` holds its argument twice")]
    fn handle(
        &mut self,
        work: Work,
        changed_hands: bool,
        span: &Span,
    ) -> impl Future<Output = Outcome> + Send {
        async move {
            let shared = Arc::clone(self.shared());
            let meters = match &work {
                Work::Message(m) => Some(shared.meters.provider(&m.provider)),
                Work::Timer { .. } | Work::TakeOver { .. } => None,
            };
            self.failed.store(false, Ordering::Relaxed);
            let (turn, key) = (Arc::clone(&self.turn), self.key.clone());
            // Where a handler's kept outbox marks go, with durability (see `outbox.rs`).
            let marks = match (&shared.durability, shared.inbox()) {
                (Some(d), Ok(inbox)) => Some((
                    outbox::Writer { inbox, ttl: d.outbox_ttl, events: &shared.events, key: &key },
                    d.mark_within,
                )),
                _ => None,
            };
            let outcome = {
                let handled = self
                    .bounded(work, changed_hands)
                    .instrument(tracing::debug_span!(target: "botmesh", "handle"));
                // Pinned once, before the two ways of awaiting it: moved into each of them, it
                // would take room twice in this future, which every message's job carries.
                tokio::pin!(handled);
                match &marks {
                    Some((to, within)) if !within.is_zero() => {
                        tokio::select! {
                            biased;
                            outcome = &mut handled => outcome,
                            () = turn.marks.write_late(to, *within) => handled.await,
                        }
                    }
                    _ => handled.await,
                }
            };
            // A turn lost meanwhile: the chat's next holder handles the message again.
            let lost = self.turn.check().is_err();
            let failed = lost || self.failed.load(Ordering::Relaxed) || outcome.unfinished();
            if let Some((to, _)) = &marks {
                let clean = !failed && !self.turn.is_cut();
                self.turn.marks.settle(to, clean).await;
            }
            if let Some(meters) = meters {
                let word = match (lost, failed) {
                    (true, _) => "lost",
                    (false, true) => "failed",
                    (false, false) => "handled",
                };
                span.record("outcome", word);
                if failed {
                    meters.failed.increment(1);
                } else {
                    meters.handled.increment(1);
                }
            }
            outcome
        }
    }

    /// Hands back a job a stopping bot has no time left for: its ticket is withdrawn and its
    /// journaled message released, so the chat's next holder (on another replica) takes it
    /// over first. A message without the journal is reported as not handled; a sender still
    /// waiting in [`Dispatcher::accept`] is told to deliver it again.
    pub(super) async fn hand_back_job(&mut self, mut job: Job) {
        let sender_waits = job.accepted.take().map(|tx| tx.send(Err(BotError::NotRunning)));
        let Job { work, ticket, journal, .. } = job;
        match journal {
            Journal::Recorded { id, .. } => self.not_run(&work, Some(&id)).await,
            // Its sender was told to deliver it again: not lost.
            Journal::Off | Journal::Pending if sender_waits.is_some() => {}
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
    pub(super) async fn not_run(&mut self, work: &Work, id: Option<&str>) {
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
    pub(super) async fn acquire(
        &mut self,
        ticket: Option<Result<Ticket, Error>>,
        work: &Work,
        recorded: Option<&str>,
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
                    Box::pin(self.not_run(work, recorded)).await;
                    return Err(());
                }
            },
            Err(e) => Err(e),
        };
        let turn = match acquired {
            Ok(turn) => turn,
            Err(e) => {
                if let Some(id) = recorded {
                    // Not the message's fault: no attempt is counted. The ticket was withdrawn
                    // naming this replica, so the next holder takes it.
                    Box::pin(self.hand_back(id)).await;
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
                Box::pin(self.end(active, EndReason::LeaseLost)).await;
            }
        }
        Ok(Some((Arc::clone(coordination), turn)))
    }

    /// Releases journaled message `id`, which this replica could not run, for the chat's next
    /// holder: it takes the message over before its own (its grant names this replica), or,
    /// if the chat stays quiet, the periodic replay does.
    pub(super) async fn hand_back(&mut self, id: &str) {
        let shared = Arc::clone(self.shared());
        durable::release(&shared, &self.key, id, &shared.owner).await;
    }

    /// Runs `work`, bounded by `settle` under coordination, and returns what it came to.
    pub(super) async fn bounded(&mut self, work: Work, changed_hands: bool) -> Outcome {
        let settle = self.shared().coordination.as_ref().map(|c| c.settle());
        self.outcome = Outcome::default();
        let (slot, disp) = (Arc::clone(&self.turn), Arc::clone(&self.disp));
        slot.set_cut(false);
        let finished = {
            // One future for both ways of running it: a second would double this one's size.
            let run = self.work(work, changed_hands);
            tokio::pin!(run);
            match settle {
                // Without coordination nothing bounds it.
                None => Some(run.await),
                Some(settle) => tokio::select! {
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
                },
            }
        };
        if finished.is_none() {
            match self.active.take() {
                // The step outlived `settle`: stop it, keeping its checkpoint, before the turn
                // goes to whoever is next.
                Some(active) => Box::pin(self.end(active, EndReason::Suspended)).await,
                // A handler or a hook did not finish: its message is not done.
                None => self.outcome.cut = true,
            }
        }
        Outcome { used: finished.unwrap_or(true), ..std::mem::take(&mut self.outcome) }
    }

    /// How long the chat's in-memory conversation may still wait for an answer: its wait
    /// timeout, or a day when it has none.
    pub(super) fn waiting_for(&self) -> Option<Duration> {
        const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
        let (park, _) = self.active.as_ref()?.parked?;
        Some(park.timeout.unwrap_or(NO_TIMEOUT))
    }

    /// A context for `msg` under this worker's turn, for handler number `handler`, or for the
    /// hand-over fallback when `None`.
    pub(super) fn ctx(&self, msg: impl Into<Arc<Message>>, handler: Option<usize>) -> Ctx {
        let shared = Arc::clone(self.shared());
        Ctx::new(shared, Arc::clone(&self.turn), self.key.clone(), msg, handler)
    }

    pub(super) fn report(&self, error: BotError) {
        self.failed.store(true, Ordering::Relaxed);
        match &self.current {
            Some(message) => self.shared().events.message_error(&self.key, message, error),
            None => self.shared().events.error(Some(&self.key), error),
        }
    }
}

#[cfg(test)]
mod tests;
