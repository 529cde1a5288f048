//! Driving the chat's conversation: a future polled until it parks on a wait or ends, its
//! timers, and its end (checkpoint cleared or kept, events).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use botmesh_traits::{Error, ErrorKind, LeaseLostReason, Recovery};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::job::Timer;
use super::panic_message;
use super::worker::Worker;
use crate::conv::{Input, Link, Park};
use crate::flow::Def;
use crate::runner::{self, Next, Resume};
use crate::shared::Shared;
use crate::texts::keys;
use crate::{BotError, ConvCtx, EndReason, Event, Message, Result};

pub(super) type ConvFuture =
    Pin<Box<dyn Future<Output = std::thread::Result<Result<Next>>> + Send>>;

/// A conversation in this worker's memory.
pub(super) struct Active {
    pub(super) ctx: ConvCtx,
    pub(super) name: String,
    pub(super) fut: ConvFuture,
    /// Names this conversation among the worker's, for timers that come due later.
    pub(super) serial: u64,
    /// How many times it parked; names the wait a timer belongs to.
    pub(super) park: u64,
    pub(super) parked: Option<(Park, Instant)>,
    /// A timer job for the current wait is on its way through the chat's queue.
    pub(super) timer_queued: bool,
    /// A timer job that could not get its turn is tried again no sooner than this.
    pub(super) timer_retry_at: Instant,
    /// Counts it among the replica's live conversations while it exists.
    pub(super) _live: Live,
}

/// Counts a conversation among the replica's live ones from its start until it is dropped,
/// whichever way it ends.
pub(super) struct Live(Arc<Shared>);

impl Live {
    fn new(shared: Arc<Shared>) -> Self {
        shared.meters.conversations.add(1);
        Self(shared)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.meters.conversations.sub(1);
    }
}

impl Active {
    pub(super) fn deadline(&self) -> Option<(Instant, Timer)> {
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

pub(super) enum Driven {
    Parked(Park),
    Exited(std::thread::Result<Result<Next>>),
}

/// Polls a conversation until it ends or parks on a wait.
pub(super) struct DriveUntilParked<'a> {
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

impl Worker {
    pub(super) fn install(&mut self, def: Def, msg: Message, resume: Option<(Resume, u64)>) {
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
            _live: Live::new(Arc::clone(&shared)),
        });
    }

    /// Runs the active conversation until it waits again or ends, following `goto`s.
    ///
    /// Boxed: a conversation's step is a large future, and most messages (a bot's plain
    /// handlers) never drive one, so the futures on their path stay small instead of
    /// carrying (and moving, job after job) room for it.
    pub(super) fn drive(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.drive_until_waiting())
    }

    async fn drive_until_waiting(&mut self) {
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
                    let msg = Message::clone(&active.ctx.message());
                    self.end(active, EndReason::Completed).await;
                    // A flow this one interrupted comes back, and is driven next.
                    self.resume_aside(msg).await;
                }
                Ok(Ok(Next::Start(name))) => {
                    let msg = Message::clone(&active.ctx.message());
                    self.end(active, EndReason::Replaced).await;
                    match self.shared().def.defs.get(&name).cloned() {
                        Some(def) => self.install(def, msg, None),
                        None => self.report(BotError::UnknownConversation { name }),
                    }
                }
                Ok(Err(BotError::Idle { .. })) => self.end(active, EndReason::Idle).await,
                Ok(Err(BotError::Contract(Error::LeaseLost { reason, .. }))) => {
                    // A refused compare-and-set is news; a stalled turn the coordination runtime
                    // reported when it gave it up. One loss, one event.
                    if reason == LeaseLostReason::Superseded {
                        let key = self.key.clone();
                        self.shared().events.emit(Event::LeaseLost { key, reason });
                    }
                    self.end(active, EndReason::LeaseLost).await;
                }
                Ok(Err(e)) => {
                    let (recovery, kind) = (e.recovery(), e.kind());
                    self.report(e);
                    if recovery == Recovery::Fail {
                        self.end(active, EndReason::Failed).await;
                    } else {
                        // A store or the transport failed under the step, or the transport
                        // went away (a stop, a step-down), not the step's own logic: it stays
                        // where its checkpoint says, and with durability the message is handed
                        // back to run it again; to the replica that runs the transport, when
                        // that is another one, without counting an attempt.
                        match kind {
                            Some(ErrorKind::ProviderNotLeader) => self.outcome.elsewhere = true,
                            _ => self.outcome.faulted = true,
                        }
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

    pub(super) async fn on_timer(&mut self, serial: u64, park: u64, timer: Timer) -> bool {
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

    pub(super) async fn end(&mut self, active: Active, reason: EndReason) {
        // Dropping the future first stops whatever the conversation was doing.
        let Active { ctx, name, fut, .. } = active;
        drop(fut);
        if matches!(reason, EndReason::Suspended | EndReason::LeaseLost) && !ctx.holds_input() {
            // The message being handled changed this conversation and no checkpoint holds that.
            self.outcome.cut = true;
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
}
