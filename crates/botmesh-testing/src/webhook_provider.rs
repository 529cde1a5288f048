//! A webhook provider over plain JSON, for tests and as the smallest complete example of an
//! acknowledged provider.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Bytes;
use botmesh_traits::webhook::axum::extract::State;
use botmesh_traits::webhook::axum::http::HeaderMap;
use botmesh_traits::webhook::axum::response::{IntoResponse, Response};
use botmesh_traits::webhook::axum::routing::post;
use botmesh_traits::webhook::{self, IntakeSlot, Limits, Rejection};
use botmesh_traits::{
    Capabilities, Content, Error, Inbound, InboundStream, Intake, MessageId, Outbound, Provider,
    ProviderEvent, Result, SendReceipt, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use serde::Deserialize;

use crate::sent_log::SentLog;

/// The header carrying the shared secret.
pub const SECRET_HEADER: &str = "x-botmesh-secret";

/// The path deliveries are posted to.
pub const WEBHOOK_PATH: &str = "/webhook";

/// A delivery as the platform posts it: `{"id": "m1", "chat": "c1", "text": "hi"}`, or with
/// `"content"` (a [`Content`] as JSON) instead of `"text"`, and optionally `"participant"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Posted {
    id: String,
    chat: String,
    #[serde(default)]
    participant: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    content: Option<Content>,
}

/// The longest id or chat a delivery may carry.
const MAX_ID: usize = 256;

impl Posted {
    /// The message, or why the delivery is malformed.
    fn into_inbound(self, provider: &str) -> std::result::Result<Inbound, Rejection> {
        let bad_id = |s: &str| s.is_empty() || s.len() > MAX_ID || s.chars().any(char::is_control);
        if bad_id(&self.id) || bad_id(&self.chat) {
            return Err(Rejection::malformed("id and chat are 1 to 256 printable characters"));
        }
        if self.participant.as_deref().is_some_and(bad_id) {
            return Err(Rejection::malformed("participant is 1 to 256 printable characters"));
        }
        let content = match (self.text, self.content) {
            (Some(body), None) => Content::Text { body },
            (None, Some(content)) => content,
            _ => return Err(Rejection::malformed("exactly one of text and content")),
        };
        let mut inbound = Inbound::new(provider, self.id, self.chat, content);
        if let Some(p) = self.participant {
            inbound = inbound.in_group(p);
        }
        Ok(inbound)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A shared-session provider whose platform posts JSON to a webhook: what a Meta or Telegram
/// webhook provider does, without a platform's format.
///
/// Every replica runs one. [`router`](Self::router) is the endpoint (`POST /webhook`, the
/// secret in the `x-botmesh-secret` header, compared in constant time); a delivery is answered
/// with the bot's [`Verdict`](botmesh_traits::Verdict): `200` once it is queued (and journaled,
/// with durability), `503` while this replica cannot take it (so the platform delivers it
/// again, here or elsewhere), `413` or `400` when it never can. What does not parse is
/// answered `400`, a wrong secret `401`; neither reaches the bot. Sends are recorded, as the
/// platform would receive them.
///
/// Clones share one endpoint and one record of sends.
#[derive(Clone, Debug)]
pub struct WebhookTestProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    secret: Arc<[u8]>,
    limits: Limits,
    slot: IntakeSlot,
    sent: SentLog,
    next_out: AtomicU64,
    /// How many of the next sends are throttled, and for how long each.
    throttled: Mutex<(u32, Duration)>,
}

#[derive(Clone)]
struct Endpoint(Arc<Inner>);

async fn receive(
    State(Endpoint(inner)): State<Endpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let given = headers.get(SECRET_HEADER).map(|v| v.as_bytes());
    if !webhook::secret_matches(given, &inner.secret) {
        return Rejection::Unauthorized.into_response();
    }
    let posted: Posted = match serde_json::from_slice(&body) {
        Ok(posted) => posted,
        Err(e) => return Rejection::malformed(e.to_string()).into_response(),
    };
    match posted.into_inbound(&inner.id) {
        Ok(inbound) => inner.slot.accept(inbound).await.into_response(),
        Err(rejection) => rejection.into_response(),
    }
}

impl WebhookTestProvider {
    /// A provider with id `id` whose platform signs deliveries with `secret`.
    pub fn new(id: impl Into<String>, secret: impl AsRef<[u8]>) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: id.into(),
                secret: Arc::from(secret.as_ref()),
                limits: Limits::new().max_body_bytes(64 * 1024),
                slot: IntakeSlot::new(),
                sent: SentLog::default(),
                next_out: AtomicU64::new(1),
                throttled: Mutex::new((0, Duration::ZERO)),
            }),
        }
    }

    /// The webhook endpoint, to mount in a server of your own (next to your health checks),
    /// bounded by the provider's limits: 64 KiB bodies, 10 s per request.
    pub fn router(&self) -> Router {
        let router = Router::new()
            .route(WEBHOOK_PATH, post(receive))
            .with_state(Endpoint(Arc::clone(&self.inner)));
        webhook::harden(router, &self.inner.limits)
    }

    /// Serves [`router`](Self::router) on `addr` until the provider is stopped.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<()> {
        webhook::serve(self.router(), addr, self.inner.slot.closed()).await
    }

    /// Everything the bot sent so far, in order.
    pub fn sent(&self) -> Vec<Outbound> {
        self.inner.sent.all()
    }

    /// The texts the bot sent to `chat`, in order.
    pub fn texts_to(&self, chat: &str) -> Vec<String> {
        self.inner.sent.texts_to(chat)
    }

    /// Waits until the bot has sent at least `n` messages in all.
    pub async fn wait_sent(&self, n: usize) {
        self.inner.sent.wait(n).await;
    }

    /// Makes the next `count` sends fail with [`Error::RateLimited`] asking to wait
    /// `retry_after`, as a throttling platform does.
    pub fn rate_limit_sends(&self, count: u32, retry_after: Duration) {
        *lock(&self.inner.throttled) = (count, retry_after);
    }
}

#[async_trait]
impl Provider for WebhookTestProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::shared()
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        self.inner.slot.open(intake);
        // Deliveries go through the intake; the stream reports the transport open and ends
        // when the provider stops.
        let closed = self.inner.slot.closed();
        let open =
            futures_util::stream::once(async { ProviderEvent::Status(TransportStatus::Open) });
        let end = futures_util::stream::once(closed).filter_map(|()| async { None });
        Ok(Box::pin(open.chain(end)))
    }

    async fn stop(&self) -> Result<()> {
        self.inner.slot.close();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        {
            let mut throttled = lock(&self.inner.throttled);
            if throttled.0 > 0 {
                throttled.0 -= 1;
                return Err(Error::RateLimited { retry_after: throttled.1 });
            }
        }
        self.inner.sent.push(message);
        let id = self.inner.next_out.fetch_add(1, Ordering::Relaxed);
        Ok(SendReceipt::new(Some(MessageId::from(format!("out{id}")))))
    }

    fn status(&self) -> TransportStatus {
        match self.inner.slot.is_open() {
            true => TransportStatus::Open,
            false => TransportStatus::Closed,
        }
    }
}
