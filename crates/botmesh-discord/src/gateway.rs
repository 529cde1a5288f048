//! Keeping the gateway connected on the replica elected for it, and handing what arrives to
//! the bot.
//!
//! The supervisor asks `/gateway/bot` for the URL and the session start limit, runs one
//! session at a time (`session.rs`) and, when one is lost, connects again after a pause that
//! doubles from half a second to 30 seconds (back to the start after a session on which
//! Discord acknowledged a heartbeat), and is never shorter than a random 1 to 5 s. The
//! transport is open from `READY` or `RESUMED` until the session ends; after a session on
//! which no heartbeat was acknowledged, only from the first acknowledged heartbeat of the next.
//! A token or intents Discord refuses end the supervisor: the transport stays closed, so the
//! election's step-down rule hands the gateway to a standby (which fails the same way, but the
//! bot reports it) and a fixed token can be started again.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use botmesh_traits::{Inbound, Intake, ProviderEvent, TransportStatus};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::session::{self, Ended};
use crate::state::Inner;

const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// The longest the supervisor waits for a session start, when Discord says none is left.
const MAX_START_WAIT: Duration = Duration::from_secs(3600);

/// Sleeps `wait`; `false` when a stop came first.
async fn pause_for(inner: &Inner, wait: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = inner.stopped() => false,
    }
}

/// Keeps one session connected until a stop or a fatal refusal.
pub(crate) async fn supervise(inner: Arc<Inner>, arrivals: mpsc::Sender<Vec<Inbound>>) {
    let mut pause = FIRST_PAUSE;
    loop {
        let asked = tokio::select! {
            asked = inner.http.get_bot_gateway() => asked,
            () = inner.stopped() => return,
        };
        let gateway = match asked {
            Ok(gateway) => gateway,
            Err(e) if crate::errors::is_fatal(&e) => {
                give_up(&inner, &e);
                return;
            }
            Err(e) => {
                tracing::debug!(target: "botmesh", provider = inner.id(), error = %e, "asking for the gateway failed");
                if !pause_for(&inner, pause).await {
                    return;
                }
                pause = (pause * 2).min(MAX_PAUSE);
                continue;
            }
        };
        let limit = &gateway.session_start_limit;
        if limit.remaining == 0 {
            // Each IDENTIFY counts against a daily limit; past it, Discord resets the token.
            let wait = Duration::from_millis(limit.reset_after).min(MAX_START_WAIT);
            tracing::warn!(target: "botmesh", provider = inner.id(), ?wait, "no gateway session starts left; waiting for the limit to reset");
            if !pause_for(&inner, wait.max(FIRST_PAUSE)).await {
                return;
            }
            continue;
        }
        match session::run(&inner, gateway.url, &arrivals).await {
            Ended::Stopped => return,
            Ended::Fatal(e) => {
                give_up(&inner, &e);
                return;
            }
            Ended::Lost { healthy } => {
                // A session that went stale keeps the next ones closed until Discord
                // acknowledges a heartbeat on them: a gateway that lets every session go stale
                // never opens the transport for a moment, so a leader on it steps down.
                inner.stale.store(!healthy, Ordering::SeqCst);
                if healthy {
                    pause = FIRST_PAUSE;
                }
                // Discord asks for a random wait of 1 to 5 s before identifying again after
                // an invalid session that cannot be resumed. serenity does not tell that end
                // apart (its runner asks its manager for a restart and returns `Ok`, as after
                // heartbeats that went unacknowledged), and every new session here identifies:
                // so each one waits at least that long.
                let wait = pause.max(reidentify_wait());
                tracing::info!(target: "botmesh", provider = inner.id(), ?wait, "gateway session lost; connecting again");
                if !pause_for(&inner, wait).await {
                    return;
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

fn give_up(inner: &Inner, e: &serenity::Error) {
    tracing::error!(target: "botmesh", provider = inner.id(), error = %e, "discord refused the gateway; not connecting again");
    inner.set_status(TransportStatus::Closed);
    inner.report(ProviderEvent::Rejected { reason: format!("discord refused the gateway: {e}") });
}

/// A random wait from 1 to 5 s: hashing the time with std's randomly keyed hasher is random
/// enough to spread the replicas' `IDENTIFY`s.
fn reidentify_wait() -> Duration {
    let random = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    Duration::from_millis(1000 + random % 4001)
}

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
