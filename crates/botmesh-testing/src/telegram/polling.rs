//! `getUpdates`: offsets that confirm, long polls woken by a `Notify`, and the one-poller rule.
//!
//! Telegram serves one `getUpdates` at a time per bot. The stand-in counts the calls in flight
//! and answers one that arrives while another is still waiting with `409 Conflict: terminated
//! by other getUpdates request` (real Telegram ends the older one instead; either way two
//! pollers of one bot show up as conflicts), so a test can prove that only one replica polls.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::faults::ApiError;
use super::params::Params;
use super::state::Shared;

/// The longest long poll served, in seconds.
const MAX_TIMEOUT: i64 = 3600;

/// What teloxide's `ApiError::TerminatedByOtherGetUpdates` matches, after `Conflict: `.
const TERMINATED: &str =
    "terminated by other getUpdates request; make sure that only one bot instance is running";

/// What a `getUpdates` gets while a webhook is set, after `Conflict: `.
const WEBHOOK_ACTIVE: &str = "can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";

/// Counts one `getUpdates` in flight while it lives.
struct Poller(Arc<Shared>);

impl Drop for Poller {
    fn drop(&mut self) {
        self.0.update(|inner| inner.pollers_now = inner.pollers_now.saturating_sub(1));
    }
}

/// `getUpdates` with `offset`, `limit` (1 to 100) and `timeout` (seconds to wait for an
/// update when none is queued).
pub(super) async fn get_updates(shared: &Arc<Shared>, params: &Params) -> Result<Value, ApiError> {
    let offset = params.int("offset")?.unwrap_or(0);
    let limit = usize::try_from(params.int("limit")?.unwrap_or(100).clamp(1, 100)).unwrap_or(100);
    let timeout = params.int("timeout")?.unwrap_or(0).clamp(0, MAX_TIMEOUT);
    let _poller = shared.update(|inner| {
        if inner.webhook.is_some() {
            return Err(ApiError::conflict(WEBHOOK_ACTIVE));
        }
        inner.pollers_now += 1;
        inner.max_pollers = inner.max_pollers.max(inner.pollers_now);
        if inner.pollers_now > 1 {
            inner.pollers_now -= 1;
            inner.conflicts += 1;
            return Err(ApiError::conflict(TERMINATED));
        }
        Ok(Poller(Arc::clone(shared)))
    })?;
    shared.update(|inner| inner.confirm(offset));
    let deadline = Instant::now() + Duration::from_secs(timeout.unsigned_abs());
    loop {
        let mut queued = pin!(shared.updates.notified());
        queued.as_mut().enable();
        let batch = shared.lock().updates_from(offset, limit);
        if !batch.is_empty() || shared.is_closed() {
            return Ok(Value::Array(batch));
        }
        if tokio::time::timeout_at(deadline, queued).await.is_err() {
            return Ok(Value::Array(Vec::new()));
        }
    }
}
