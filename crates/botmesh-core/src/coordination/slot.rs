//! The turn a chat's worker holds, shared with the chat's contexts: every send and checkpoint
//! write goes through it, checked against the turn before it starts and while it runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::Notify;

use botmesh_traits::Error;

use super::Turn;
use crate::outbox::Marks;

/// The turn a chat's worker holds right now, shared with the contexts of that chat so that
/// their sends and checkpoint writes are fenced, and so that the worker can let the effects
/// already on the wire finish before it gives the turn up.
#[derive(Default)]
pub(crate) struct TurnSlot {
    turn: Mutex<Option<Arc<dyn Turn>>>,
    /// The journal id of the message handled now when it is handled for the first time
    /// (journaled by this very job).
    fresh: Mutex<Option<String>>,
    /// The job running under the turn was cut short (at `settle`, or by a stop): no new effect
    /// may start under it.
    cut: AtomicBool,
    /// Effects (sends, checkpoint writes) started and not finished.
    in_flight: AtomicUsize,
    /// Woken when the last effect in flight finishes.
    idle: Notify,
    /// The outbox marks of the message's handler sends, kept until its run ends.
    pub(crate) marks: Marks,
}

/// Counts an effect as in flight until it finishes or is dropped.
struct InFlight<'a>(&'a TurnSlot);

pin_project_lite::pin_project! {
    /// An effect run under the turn (see [`TurnSlot::effect`]): a future of its own rather
    /// than an `async fn`, which would hold the effect twice (as its argument and pinned).
    pub(crate) struct Effect<'a, F> {
        slot: &'a TurnSlot,
        // Set from the first poll until the effect finishes or is dropped.
        counted: Option<InFlight<'a>>,
        #[pin]
        effect: F,
    }
}

impl<T, E, F> Future for Effect<'_, F>
where
    F: Future<Output = Result<T, E>>,
    E: From<Error>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.counted.is_none() {
            this.slot.in_flight.fetch_add(1, Ordering::SeqCst);
            *this.counted = Some(InFlight(this.slot));
        }
        let done = match this.slot.check_turn() {
            Err(lost) => Err(lost.into()),
            Ok(()) => std::task::ready!(this.effect.poll(cx)),
        };
        *this.counted = None;
        Poll::Ready(done)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl TurnSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<dyn Turn>>> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says which message, if any, is handled now for the first time (journaled by this very
    /// job), as opposed to taken over, replayed or retried: its journal id.
    pub(crate) fn set_fresh(&self, id: Option<String>) {
        *self.fresh.lock().unwrap_or_else(PoisonError::into_inner) = id;
    }

    /// Whether journaled message `id` is handled now for the first time: no earlier run of
    /// its steps can have sent anything (see [`TurnSlot::set_fresh`]).
    pub(crate) fn is_fresh(&self, id: &str) -> bool {
        self.fresh.lock().unwrap_or_else(PoisonError::into_inner).as_deref() == Some(id)
    }

    pub(crate) fn set(&self, turn: Option<Arc<dyn Turn>>) {
        *self.lock() = turn;
    }

    pub(crate) fn take(&self) -> Option<Arc<dyn Turn>> {
        self.lock().take()
    }

    /// The fence of the turn held now, if any.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.lock().as_ref().map(|t| t.fence())
    }

    /// `Ok` outside a turn (no coordination, or work running after its turn, such as a
    /// background task), else the turn's own check; refused once the job was cut short.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &*self.lock() {
            Some(turn) if self.is_cut() => Err(Error::LeaseLost {
                key: turn.key().to_string(),
                reason: botmesh_traits::LeaseLostReason::Released,
            }),
            Some(turn) => turn.check(),
            None => Ok(()),
        }
    }

    /// Marks the job running under the turn as cut short (or not, for the next job).
    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// Whether the job running under the turn was cut short.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Runs an effect (a send, a checkpoint write) counted as in flight: a job cut short lets
    /// it finish before the turn goes, so it cannot land after the next holder started.
    ///
    /// The turn is checked again every time the effect is polled, before it makes progress: a
    /// process frozen in the middle of a send (after the check that let it start) wakes up to
    /// a lost turn and drops the send instead of finishing it out of turn. What the effect
    /// already handed to the network before the freeze reached it before the freeze, inside
    /// the turn.
    pub(crate) fn effect<F>(&self, effect: F) -> Effect<'_, F> {
        Effect { slot: self, counted: None, effect }
    }

    /// The turn's own check, without the cut: an effect started before a cut may finish.
    fn check_turn(&self) -> Result<(), Error> {
        match &*self.lock() {
            Some(turn) => turn.check(),
            None => Ok(()),
        }
    }

    /// Waits until no effect is in flight.
    pub(crate) async fn effects_done(&self) {
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}
