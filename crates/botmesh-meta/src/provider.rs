//! `MetaProvider`: one channel, its webhook slot, and sending through the Graph API.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use botmesh_traits::webhook::{IntakeSlot, Limits};
use botmesh_traits::{
    Bytes, Capabilities, Error, InboundStream, Intake, Media, MessageId, Outbound, Provider,
    ProviderEvent, Result, SendReceipt, TransportStatus, async_trait,
};
use tokio::sync::mpsc;

use crate::channel::Channel;
use crate::graph::{self, Failure};

/// Meta's Graph API, with its version.
const GRAPH_API: &str = "https://graph.facebook.com/v21.0";

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a provider's clones share.
pub(crate) struct Inner {
    pub(crate) id: String,
    pub(crate) channel: Channel,
    pub(crate) token: String,
    pub(crate) app_secret: Vec<u8>,
    pub(crate) verify_token: String,
    pub(crate) api: String,
    pub(crate) limits: Limits,
    pub(crate) http: reqwest::Client,
    pub(crate) slot: IntakeSlot,
    pub(crate) events: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    pub(crate) status: Mutex<TransportStatus>,
}

impl Inner {
    pub(crate) fn report(&self, event: ProviderEvent) {
        if let Some(tx) = lock(&self.events).as_ref() {
            let _ = tx.send(event);
        }
    }

    fn set_status(&self, status: TransportStatus) {
        if std::mem::replace(&mut *lock(&self.status), status) != status {
            self.report(ProviderEvent::Status(status));
        }
    }
}

/// One Meta channel (WhatsApp Cloud API, Messenger or Instagram) as a botmesh provider.
///
/// Every replica runs it: Meta posts to your webhook behind your load balancer. Mount
/// [`router`](Self::router) in your axum server (or [`serve`](Self::serve) it); it answers the
/// verification handshake, checks each body's `X-Hub-Signature-256`, and answers `200` only once
/// every message of the body is queued (journaled, with durability), so Meta retries what a
/// crash interrupted. Give each channel of one bot its own provider.
#[derive(Clone)]
pub struct MetaProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for MetaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token nor the secrets.
        f.debug_struct("MetaProvider")
            .field("id", &self.inner.id)
            .field("channel", &self.inner.channel)
            .finish_non_exhaustive()
    }
}

/// A client for the Graph API over rustls with the ring provider.
fn client() -> Result<reqwest::Client> {
    // Installed once per process; a provider another crate installed first is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| Error::Configuration(Box::new(e)))
}

impl MetaProvider {
    /// A provider for `channel`, calling the Graph API with the access token `token`;
    /// `app_secret` checks webhook signatures, `verify_token` answers the verification
    /// handshake. Fails only when the HTTP client cannot be built.
    pub fn new(
        channel: Channel,
        token: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
    ) -> Result<Self> {
        let app_secret: String = app_secret.into();
        Ok(Self {
            inner: Arc::new(Inner {
                id: channel.default_id().to_owned(),
                channel,
                token: token.into(),
                app_secret: app_secret.into_bytes(),
                verify_token: verify_token.into(),
                api: GRAPH_API.to_owned(),
                limits: Limits::new(),
                http: client()?,
                slot: IntakeSlot::new(),
                events: Mutex::new(None),
                status: Mutex::new(TransportStatus::Closed),
            }),
        })
    }

    fn rebuild(self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            id: shared.id.clone(),
            channel: shared.channel.clone(),
            token: shared.token.clone(),
            app_secret: shared.app_secret.clone(),
            verify_token: shared.verify_token.clone(),
            api: shared.api.clone(),
            limits: shared.limits,
            http: shared.http.clone(),
            slot: IntakeSlot::new(),
            events: Mutex::new(None),
            status: Mutex::new(TransportStatus::Closed),
        });
        let mut inner = inner;
        f(&mut inner);
        Self { inner: Arc::new(inner) }
    }

    /// The provider's id (`whatsapp`, `messenger` or `instagram` by default).
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.rebuild(|i| i.id = id)
    }

    /// Where the Graph API is served, with its version (`https://graph.facebook.com/v21.0` by
    /// default); the stand-in of `botmesh-testing` in tests.
    #[must_use]
    pub fn with_api_url(self, url: impl Into<String>) -> Self {
        let url: String = url.into();
        self.rebuild(|i| i.api = url.trim_end_matches('/').to_owned())
    }

    /// Bounds on each webhook request (1 MiB bodies and 10 s by default).
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        self.rebuild(|i| i.limits = limits)
    }

    /// Whether `url` is on one of Meta's media hosts, or on the Graph API this provider calls.
    fn meta_host(&self, url: &reqwest::Url) -> bool {
        let Some(host) = url.host_str() else { return false };
        let api_host = reqwest::Url::parse(&self.inner.api).ok();
        let api_host = api_host.as_ref().and_then(reqwest::Url::host_str);
        ["fbcdn.net", "fbsbx.com", "facebook.com", "cdninstagram.com", "instagram.com"]
            .iter()
            .any(|meta| host == *meta || host.ends_with(&format!(".{meta}")))
            || api_host == Some(host)
    }

    /// Calls `POST /{account}/messages` once.
    async fn post(&self, body: &serde_json::Value) -> Result<serde_json::Value, Failure> {
        let inner = &self.inner;
        let url = format!("{}/{}/messages", inner.api, inner.channel.account());
        let sent = inner.http.post(url).bearer_auth(&inner.token).json(body).send().await;
        let reply = sent.map_err(|e| match e.is_connect() {
            // Never reached Meta: nothing was sent.
            true => Failure::Transient(e.to_string()),
            false => Failure::Uncertain(e.to_string()),
        })?;
        let status = reply.status().as_u16();
        let retry_after = reply
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = reply.bytes().await;
        if (200..300).contains(&status) {
            let Ok(bytes) = bytes else { return Ok(serde_json::Value::Null) };
            // Sent: a reply that does not parse only costs the receipt its id.
            return Ok(serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null));
        }
        Err(graph::failure(status, retry_after, &bytes.unwrap_or_default()))
    }
}

#[async_trait]
impl Provider for MetaProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::shared().with_buttons(true)
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let inner = &self.inner;
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&inner.events) = Some(tx);
        inner.slot.open(intake);
        inner.set_status(TransportStatus::Open);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        });
        Ok(Box::pin(stream))
    }

    async fn stop(&self) -> Result<()> {
        let inner = &self.inner;
        inner.slot.close();
        *lock(&inner.status) = TransportStatus::Closed;
        lock(&inner.events).take();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let inner = &self.inner;
        let body = graph::body(&inner.channel, message)?;
        let attempt = || self.post(&body);
        let sent = attempt
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(200))
                    .with_max_times(3),
            )
            .when(|f| matches!(f, Failure::Transient(_)))
            .await;
        let chat = || message.chat.as_str().to_owned();
        match sent {
            Ok(reply) => Ok(SendReceipt::new(graph::sent_id(&reply).map(MessageId::from))),
            Err(Failure::RateLimited(retry_after)) => Err(Error::RateLimited { retry_after }),
            Err(Failure::TokenExpired) => {
                // Nothing goes out with this token any more: the transport is reported closed
                // (a leader steps down; restart the bot with a new token).
                inner.set_status(TransportStatus::Closed);
                Err(Error::Unauthorized { provider: inner.id.clone() })
            }
            Err(Failure::RecipientGone) => {
                Err(Error::RecipientGone { provider: inner.id.clone(), chat: chat() })
            }
            Err(Failure::WindowClosed) => {
                Err(Error::WindowClosed { provider: inner.id.clone(), chat: chat() })
            }
            Err(Failure::Transient(why) | Failure::Uncertain(why)) => {
                Err(Error::provider(&inner.id, "send", why))
            }
            // Meta refused the request as it is (a title too long, a bad id): sending it
            // again does not help.
            Err(Failure::Other(why)) => Err(Error::InvalidInput { reason: why }),
        }
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }

    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let inner = &self.inner;
        let failed = |e: reqwest::Error| Error::provider(&inner.id, "fetch_media", e);
        // Messenger and Instagram attachments come as URLs, fetched without the token and only
        // from Meta's hosts (a user may share any link); WhatsApp media as ids to look up,
        // whose download URL the Graph API gives and the token opens.
        if media.url.starts_with("https://") || media.url.starts_with("http://") {
            let url = reqwest::Url::parse(&media.url).map_err(|e| Error::InvalidInput {
                reason: format!("a media URL that does not parse: {e}"),
            })?;
            if !self.meta_host(&url) {
                let reason = format!("{} is not a Meta media host", url.host_str().unwrap_or("?"));
                return Err(Error::InvalidInput { reason });
            }
            let got = inner.http.get(url).send().await.map_err(failed)?;
            return got.error_for_status().map_err(failed)?.bytes().await.map_err(failed);
        }
        let url = {
            let lookup = format!("{}/{}", inner.api, media.url);
            let found =
                inner.http.get(lookup).bearer_auth(&inner.token).send().await.map_err(failed)?;
            let found = found.error_for_status().map_err(failed)?;
            let found: serde_json::Value = found.json().await.map_err(failed)?;
            let url = found.get("url").and_then(serde_json::Value::as_str);
            url.ok_or_else(|| Error::provider(&inner.id, "fetch_media", "no url for the media id"))?
                .to_owned()
        };
        let got = inner.http.get(url).bearer_auth(&inner.token).send().await.map_err(failed)?;
        got.error_for_status().map_err(failed)?.bytes().await.map_err(failed)
    }
}
