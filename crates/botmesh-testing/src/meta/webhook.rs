//! The webhook sender: Meta calling the bot's replicas.
//!
//! Every queued body is posted, signed with [`SIGNATURE_HEADER`], to a subscriber picked
//! round-robin, as Meta's calls spread over replicas behind a load balancer. A non-2xx answer
//! or a failed connection is recorded and the body is posted again, to the next subscriber,
//! after a delay that starts at the configured first delay and doubles up to the maximum; it
//! is retried until a subscriber takes it.
//!
//! Bodies of different users go concurrently, but a user's body waits until every older body
//! concerning that user has been taken (the per-user ordering key is `(channel, user id)`;
//! a batch waits for all its users). Meta does not promise this order; the stand-in keeps it
//! so that what a test sees is deterministic per chat.
//!
//! The handshake ([`verify`]) and the raw sender ([`post_raw`]) are here too.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, USER_AGENT};
use tokio::task::JoinSet;

use super::ids;
use super::records::Delivery;
use super::signature::{SIGNATURE_HEADER, signature};
use super::state::{Job, Shared};

/// How long a delivery waits for the subscriber's answer.
pub(super) const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The `User-Agent` Meta's webhook calls carry.
const META_AGENT: &str = "facebookexternalua";

/// Posts queued bodies until the server stops; each body that may go gets a task of its own.
pub(super) async fn run(shared: Arc<Shared>) {
    // Dropped with this task, which aborts the bodies in flight.
    let mut tasks = JoinSet::new();
    loop {
        let mut wake = pin!(shared.wake.notified());
        wake.as_mut().enable();
        if shared.is_closed() {
            return;
        }
        while tasks.try_join_next().is_some() {}
        let ready = shared.lock().take_ready();
        for job in ready {
            tasks.spawn(deliver(Arc::clone(&shared), job));
        }
        wake.await;
    }
}

/// Posts one body until a subscriber takes it.
async fn deliver(shared: Arc<Shared>, job: Job) {
    let signed = signature(&shared.config.app_secret, job.body.as_bytes());
    let mut delay = shared.config.retry_first;
    let max = shared.config.retry_max.max(shared.config.retry_first);
    let mut attempt: u32 = 1;
    let mut index = job.first_subscriber;
    loop {
        let Some(url) = subscriber(&shared, index).await else { return };
        let request = shared
            .http
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, META_AGENT)
            .header(SIGNATURE_HEADER, &signed)
            .body(job.body.clone());
        let (status, error) = match request.send().await {
            Ok(response) => {
                let status = response.status();
                let error = (!status.is_success()).then(|| format!("answered {status}"));
                (Some(status.as_u16()), error)
            }
            Err(e) => (None, Some(format!("could not connect: {e}"))),
        };
        let delivered = error.is_none();
        shared.update_outbox(|inner| {
            inner.deliveries.push(Delivery {
                delivery_id: job.delivery_id,
                channel: job.channel,
                url,
                status,
                error,
                attempt,
                message_ids: job.message_ids.clone(),
                body: job.body.clone(),
            });
            if delivered {
                inner.delivered(job.delivery_id);
            }
        });
        if delivered {
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(max);
        attempt = attempt.saturating_add(1);
        index = index.wrapping_add(1);
    }
}

/// The subscriber for a round-robin index, waiting while there is none; `None` once the
/// server stops.
async fn subscriber(shared: &Shared, index: usize) -> Option<String> {
    loop {
        let mut wake = pin!(shared.wake.notified());
        wake.as_mut().enable();
        if shared.is_closed() {
            return None;
        }
        if let Some(url) = shared.lock().subscriber(index) {
            return Some(url);
        }
        wake.await;
    }
}

/// The subscription handshake: `GET url?hub.mode=subscribe&hub.verify_token=<token>&
/// hub.challenge=<random>`; says whether the answer was `200` with exactly the challenge as
/// its body.
pub(super) async fn verify(http: &reqwest::Client, url: &str, verify_token: &str) -> bool {
    let Ok(mut url) = reqwest::Url::parse(url) else { return false };
    let challenge = ids::challenge();
    url.query_pairs_mut()
        .append_pair("hub.mode", "subscribe")
        .append_pair("hub.verify_token", verify_token)
        .append_pair("hub.challenge", &challenge);
    let Ok(response) = http.get(url).header(USER_AGENT, META_AGENT).send().await else {
        return false;
    };
    if response.status() != reqwest::StatusCode::OK {
        return false;
    }
    response.text().await.is_ok_and(|body| body == challenge)
}

/// Posts bytes as a webhook body, with `signature` as the [`SIGNATURE_HEADER`] if given;
/// returns the status, or `None` when the receiver could not be reached.
pub(super) async fn post_raw(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    signature: Option<&str>,
) -> Option<u16> {
    let mut request = http
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, META_AGENT)
        .body(body);
    if let Some(signature) = signature {
        request = request.header(SIGNATURE_HEADER, signature);
    }
    request.send().await.ok().map(|r| r.status().as_u16())
}
