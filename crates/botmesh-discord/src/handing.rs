//! Handing what the gateway delivered to the bot, in order, and what a stop leaves behind.
//!
//! Discord never delivers a message again, so a message the bot cannot take now (its journal
//! is down) is offered again until it is taken. A stop closes the session first, then gives
//! this task until its deadline to hand over what is queued; what is left is reported dropped.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Inbound, Intake, ProviderEvent};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::state::Inner;

/// When the handing over must end: from the deadline a stop sends, once one did.
struct Drain {
    signal: Option<oneshot::Receiver<Instant>>,
    deadline: Option<Instant>,
}

impl Drain {
    /// Resolves once a stop asked for the queue to be handed over, and sets the deadline.
    async fn asked(&mut self) {
        if self.deadline.is_some() {
            return;
        }
        let deadline = match self.signal.as_mut() {
            // Dropped without a stop (a start replaced the task): nothing more is handed.
            Some(signal) => signal.await.unwrap_or_else(|_| Instant::now()),
            None => Instant::now(),
        };
        self.signal = None;
        self.deadline = Some(deadline);
    }

    /// Resolves at the deadline, never before one was set.
    async fn passed(&mut self) {
        self.asked().await;
        if let Some(deadline) = self.deadline {
            tokio::time::sleep_until(deadline).await;
        }
    }

    /// Runs `work` until it ends, or `None` once the deadline passed.
    async fn before<F: Future>(&mut self, work: F) -> Option<F::Output> {
        tokio::select! {
            out = work => Some(out),
            () = self.passed() => None,
        }
    }
}

/// Hands each arrival to the bot in order, offering a message again while the bot cannot take
/// it now (its journal is down), since Discord never delivers it again.
///
/// Once `drain` gives a deadline (a stop, after the session closed), what is queued is handed
/// over until the queue is empty or the deadline passed; what is left then is reported dropped.
pub(crate) async fn hand_over(
    inner: Arc<Inner>,
    intake: Intake,
    mut arrivals: mpsc::Receiver<Vec<Inbound>>,
    drain: oneshot::Receiver<Instant>,
) {
    let mut drain = Drain { signal: Some(drain), deadline: None };
    loop {
        let messages = if drain.deadline.is_some() {
            match arrivals.try_recv() {
                Ok(messages) => messages,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                got = arrivals.recv() => match got {
                    Some(messages) => messages,
                    None => return,
                },
                () = drain.asked() => continue,
            }
        };
        let mut messages = VecDeque::from(messages);
        while let Some(inbound) = messages.pop_front() {
            if !offer(&inner, &intake, &inbound, &mut drain).await {
                let mut left = vec![inbound];
                left.extend(messages);
                arrivals.close();
                while let Ok(more) = arrivals.try_recv() {
                    left.extend(more);
                }
                report_dropped(&inner, &left, "the provider stopped before the bot took them");
                return;
            }
        }
    }
}

/// Offers `inbound` to the bot until it takes or refuses it; `false` when the drain's deadline
/// passed first.
async fn offer(inner: &Inner, intake: &Intake, inbound: &Inbound, drain: &mut Drain) -> bool {
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(verdict) = drain.before(intake.accept(inbound.clone())).await else {
            return false;
        };
        if verdict.is_taken() {
            return true;
        }
        if verdict.status() != 503 {
            let reason = format!("message {} refused by the bot: {verdict}", inbound.id);
            inner.report(ProviderEvent::Rejected { reason });
            return true;
        }
        if drain.before(tokio::time::sleep(backoff)).await.is_none() {
            return false;
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Reports messages read from the gateway that never reach the bot, and why: a warning with
/// their ids, and one `Rejected` event.
pub(crate) fn report_dropped(inner: &Inner, messages: &[Inbound], why: &str) {
    if messages.is_empty() {
        return;
    }
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    tracing::warn!(target: "botmesh", provider = inner.id(), count = ids.len(), ?ids, "messages read from the gateway dropped: {why}");
    let reason = format!("{} messages dropped ({why}): {}", ids.len(), ids.join(", "));
    inner.report(ProviderEvent::Rejected { reason });
}
