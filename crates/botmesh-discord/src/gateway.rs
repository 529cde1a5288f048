//! Keeping the gateway connected on the replica elected for it (what arrives is handed to the
//! bot by `handing.rs`).
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

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use botmesh_traits::{Inbound, ProviderEvent, TransportStatus};
use tokio::sync::mpsc;

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
