//! What a provider's clones share: its settings, its HTTP client, and what it holds while
//! started.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::{ProviderEvent, TransportStatus};
use serenity::gateway::ShardMessenger;
use serenity::http::Http;
use serenity::model::gateway::GatewayIntents;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a provider is set up with, before it is shared.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) id: String,
    pub(crate) token: Arc<str>,
    pub(crate) intents: GatewayIntents,
    /// Where API calls go instead of `https://discord.com` (serenity's proxy setting).
    pub(crate) proxy: Option<String>,
    /// How long a stop waits for the websocket to close cleanly before it drops it, and then
    /// for the messages already read to be handed to the bot.
    pub(crate) close_timeout: Duration,
    /// How many gateway events may wait for the bot to take them.
    pub(crate) queue_limit: usize,
}

/// The gateway connection of a started provider.
#[derive(Default)]
pub(crate) struct Gateway {
    /// Set by `stop`: no new connection is made once it is.
    pub(crate) stopping: bool,
    /// The running shard's mailbox, to close it cleanly.
    pub(crate) messenger: Option<ShardMessenger>,
}

/// The task that hands what the gateway delivered to the bot.
pub(crate) struct Handing {
    pub(crate) task: JoinHandle<()>,
    /// Tells the task to hand over what is queued by the deadline it carries, then to end.
    pub(crate) drain: oneshot::Sender<Instant>,
}

/// What the provider's clones share.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) http: Arc<Http>,
    /// For what serenity's client does not do: sends read whatever the status, downloads.
    pub(crate) client: reqwest::Client,
    /// The bot's own user id, from `READY`: its own messages are not handed to the bot.
    pub(crate) me: Mutex<Option<u64>>,
    pub(crate) events: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    pub(crate) status: Mutex<TransportStatus>,
    pub(crate) gateway: Mutex<Gateway>,
    /// The task that hands messages to the bot.
    pub(crate) handing: Mutex<Option<Handing>>,
    /// The task that keeps the gateway connected.
    pub(crate) supervisor: Mutex<Option<JoinHandle<()>>>,
    /// Set when a session ended without Discord acknowledging a heartbeat on it: the next
    /// sessions open the transport only once a heartbeat is acknowledged on them, not at
    /// `READY`, so that a gateway that lets every session go stale keeps the transport closed.
    pub(crate) stale: AtomicBool,
    /// Set when Discord answered an API call `401`: the transport stays closed until the next
    /// start.
    pub(crate) revoked: AtomicBool,
    /// `true` from a stop until the next start.
    pub(crate) stop: watch::Sender<bool>,
}

impl Inner {
    pub(crate) fn new(settings: Settings) -> Self {
        let mut builder = serenity::http::HttpBuilder::new(&*settings.token);
        if let Some(proxy) = &settings.proxy {
            // serenity's ratelimiter cannot reach a proxy: the proxy rate-limits instead.
            builder = builder.proxy(proxy.clone()).ratelimiter_disabled(true);
        }
        Self {
            http: Arc::new(builder.build()),
            client: reqwest::Client::new(),
            settings,
            me: Mutex::new(None),
            events: Mutex::new(None),
            status: Mutex::new(TransportStatus::Closed),
            gateway: Mutex::new(Gateway::default()),
            handing: Mutex::new(None),
            supervisor: Mutex::new(None),
            stale: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            stop: watch::Sender::new(false),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.settings.id
    }

    pub(crate) fn report(&self, event: ProviderEvent) {
        if let Some(tx) = lock(&self.events).as_ref() {
            let _ = tx.send(event);
        }
    }

    /// Records and reports the transport's status, when it changed.
    pub(crate) fn set_status(&self, status: TransportStatus) {
        let changed = std::mem::replace(&mut *lock(&self.status), status) != status;
        if changed {
            tracing::debug!(target: "botmesh", provider = self.id(), ?status, "gateway status");
            self.report(ProviderEvent::Status(status));
        }
    }

    /// Opens the transport for a session that is ready (`READY` or `RESUMED`), unless the
    /// token was refused, or the last session went stale and no heartbeat was `acked` on this
    /// one yet.
    pub(crate) fn open(&self, acked: bool) {
        if self.revoked.load(Ordering::SeqCst) {
            return;
        }
        if acked || !self.stale.load(Ordering::SeqCst) {
            self.set_status(TransportStatus::Open);
        }
    }

    /// Discord answered `op` with `401`: the token was reset or revoked. The transport closes
    /// and stays closed until the next start, so that the election's step-down rule hands the
    /// gateway to a standby.
    pub(crate) fn token_refused(&self, op: &str) {
        if !self.revoked.swap(true, Ordering::SeqCst) {
            tracing::error!(target: "botmesh", provider = self.id(), op, "discord answered 401: the token was reset or revoked; closing the transport");
            let reason = format!(
                "discord answered 401 to {op}: the token was reset or revoked; \
                 the transport stays closed until the provider starts again"
            );
            self.report(ProviderEvent::Rejected { reason });
        }
        self.set_status(TransportStatus::Closed);
    }

    /// Resolves once a stop was asked for.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    pub(crate) fn me(&self) -> Option<u64> {
        *lock(&self.me)
    }
}
