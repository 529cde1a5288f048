//! `setWebhook`, `deleteWebhook`, `getWebhookInfo`, and the pusher that posts updates to the
//! webhook the way Telegram does.
//!
//! The pusher posts the oldest queued update as JSON, with the secret in
//! `X-Telegram-Bot-Api-Secret-Token`, and waits for the answer. A 2xx confirms the update and
//! the next one goes; anything else (another status, a refused connection, a timeout) is
//! recorded and the same update is posted again after a delay that starts at the configured
//! first delay and doubles up to the maximum. So updates arrive in order, one at a time.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::faults::ApiError;
use super::fixtures;
use super::params::Params;
use super::records::{Webhook, WebhookDelivery};
use super::state::{Shared, update_id};

/// The header carrying the webhook's secret token.
pub const SECRET_TOKEN_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";

/// How long a push waits for the receiver's answer.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

fn valid_secret(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `setWebhook` with `url` (http or https; an empty one removes the webhook), `secret_token`,
/// `max_connections` and `drop_pending_updates`.
pub(super) fn set_webhook(shared: &Shared, params: &Params) -> Result<Value, ApiError> {
    let url = params.string("url")?.unwrap_or_default();
    let drop_pending = params.boolean("drop_pending_updates")?.unwrap_or(false);
    let webhook = if url.is_empty() {
        None
    } else {
        let parsed = reqwest::Url::parse(&url)
            .map_err(|_| ApiError::bad_request("bad webhook: invalid webhook URL specified"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(ApiError::bad_request("bad webhook: invalid webhook URL specified"));
        }
        let secret_token = params.string("secret_token")?.filter(|s| !s.is_empty());
        if secret_token.as_deref().is_some_and(|s| !valid_secret(s)) {
            return Err(ApiError::bad_request("secret token contains unallowed characters"));
        }
        Some(Webhook { url, secret_token, max_connections: params.int("max_connections")? })
    };
    shared.update(|inner| {
        inner.webhook = webhook;
        inner.last_webhook_error = None;
        if drop_pending {
            inner.queue.clear();
        }
    });
    shared.updates.notify_waiters();
    Ok(Value::Bool(true))
}

/// `deleteWebhook`, optionally with `drop_pending_updates`.
pub(super) fn delete_webhook(shared: &Shared, params: &Params) -> Result<Value, ApiError> {
    let drop_pending = params.boolean("drop_pending_updates")?.unwrap_or(false);
    shared.update(|inner| {
        inner.webhook = None;
        inner.last_webhook_error = None;
        if drop_pending {
            inner.queue.clear();
        }
    });
    shared.updates.notify_waiters();
    Ok(Value::Bool(true))
}

/// `getWebhookInfo`: the URL (empty without a webhook), the pending count and the last error.
pub(super) fn get_webhook_info(shared: &Shared) -> Value {
    let inner = shared.lock();
    let mut info = json!({
        "url": inner.webhook.as_ref().map_or("", |w| w.url.as_str()),
        "has_custom_certificate": false,
        "pending_update_count": inner.queue.len(),
    });
    if let Some(webhook) = &inner.webhook {
        if let Some(max) = webhook.max_connections {
            info["max_connections"] = json!(max);
        }
        if let Some((date, message)) = &inner.last_webhook_error {
            info["last_error_date"] = json!(date);
            info["last_error_message"] = json!(message);
        }
    }
    info
}

/// Pushes queued updates to the webhook while one is set, until the server stops.
pub(super) async fn push_updates(shared: Arc<Shared>) {
    // Plain http to loopback: no TLS stack and no proxy.
    let Ok(http) = crate::http::client_builder().no_proxy().timeout(PUSH_TIMEOUT).build() else {
        return;
    };
    let mut delay = shared.config.retry_first;
    let mut last: Option<(i64, u32)> = None;
    loop {
        let mut wake = pin!(shared.updates.notified());
        wake.as_mut().enable();
        if shared.is_closed() {
            return;
        }
        let job = {
            let inner = shared.lock();
            match (&inner.webhook, inner.queue.front()) {
                (Some(w), Some(u)) => Some((w.clone(), u.clone())),
                _ => None,
            }
        };
        let Some((webhook, update)) = job else {
            wake.await;
            continue;
        };
        let id = update_id(&update);
        let attempt = match last {
            Some((last_id, n)) if last_id == id => n + 1,
            _ => {
                delay = shared.config.retry_first;
                1
            }
        };
        last = Some((id, attempt));
        let mut request = http.post(&webhook.url).json(&update);
        if let Some(secret) = &webhook.secret_token {
            request = request.header(SECRET_TOKEN_HEADER, secret);
        }
        let (status, error) = match request.send().await {
            Ok(response) => {
                let status = response.status();
                let error = (!status.is_success())
                    .then(|| format!("Wrong response from the webhook: {status}"));
                (Some(status.as_u16()), error)
            }
            Err(e) => (None, Some(format!("Connection failed: {e}"))),
        };
        let delivered = error.is_none();
        shared.update(|inner| {
            if delivered {
                if inner.queue.front().map(update_id) == Some(id) {
                    inner.queue.pop_front();
                }
            } else if let Some(e) = &error {
                inner.last_webhook_error = Some((fixtures::unix_now(), e.clone()));
            }
            inner.deliveries.push(WebhookDelivery {
                update_id: id,
                url: webhook.url.clone(),
                status,
                error,
                attempt,
            });
        });
        if !delivered {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(shared.config.retry_max.max(shared.config.retry_first));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked() {
        assert!(valid_secret("abc_DEF-123"));
        assert!(!valid_secret(""));
        assert!(!valid_secret("has space"));
        assert!(!valid_secret(&"a".repeat(257)));
    }
}
