//! `WhatsAppWebProvider`: its settings, starting and stopping the session, and sending.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    Bytes, Capabilities, Error, InboundStream, Intake, Media, MessageId, Outbound, Provider,
    Result, SendReceipt, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::events::{Listeners, WhatsAppEvent};
use crate::ids::message_id;
use crate::outbound::to_wa;
use crate::pump;
use crate::seam::{Session, WaConnector, WaKey, WaMedia, WaOpen, WaPairing, store_prefix};
use crate::session::{Held, SessionLock};
use crate::state::{Inner, Open, Settings, lock};
use crate::store_lock::StoreLock;

/// How long the lock of a session kept in the store outlives a holder that stopped renewing it.
const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(15);

/// How long an opener waits for a session directory's lock file that another opener holds.
const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(15);

/// One WhatsApp number on a linked-device session, as a botmesh provider.
///
/// The session is exclusive: WhatsApp lets one client hold a linked device's session, so with
/// several replicas only the elected one opens it (in [`start`](Provider::start)) and the
/// others stand by; a standby opens it within `lease + lease / 3` of the leader dying. The
/// session's keys live where its [`Session`] says: in a directory every replica reaches (a
/// lock file in it refuses a second opener, as a safety net under the lease), or in the bot's
/// shared store (a fenced lock there does).
///
/// Clones share one session.
#[derive(Clone)]
pub struct WhatsAppWebProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for WhatsAppWebProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The directory holds the session's keys; its path is no secret.
        f.debug_struct("WhatsAppWebProvider")
            .field("id", &self.inner.id)
            .field("session", &self.inner.settings.session)
            .field("pairing", &self.inner.settings.pairing)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "whatsapp-rust")]
impl WhatsAppWebProvider {
    /// A session kept as `session` says, on whatsapp-rust: a path is a session directory
    /// (`new("/var/lib/bot/whatsapp")`), [`Session::Store`] the bot's shared store. Paired by
    /// QR code unless [`with_pair_code`](Self::with_pair_code) says otherwise.
    pub fn new(session: impl Into<Session>) -> Self {
        Self::with_connector(session, crate::rust::WhatsAppRust::new())
    }

    /// A session kept in the bot's shared store, on whatsapp-rust: `new(Session::Store)`.
    /// Replicas then need no shared volume; the bot needs a store with fenced locks (Redis,
    /// Postgres, ...), given with `Bot::builder().store(..)`.
    pub fn in_store() -> Self {
        Self::new(Session::Store)
    }
}

impl WhatsAppWebProvider {
    /// A session kept as `session` says (a directory, or [`Session::Store`]), opened through
    /// `connector`: the seam's real implementation, or a stand-in in tests. Defaults: id
    /// `whatsapp-web`, pairing by QR code printed to the terminal, five seconds of intake
    /// patience before a warning, a 15 s lock in the store, 15 s of waiting for a session
    /// directory's lock.
    pub fn with_connector(session: impl Into<Session>, connector: impl WaConnector) -> Self {
        let settings = Settings {
            id: "whatsapp-web".to_owned(),
            session: session.into(),
            lock_ttl: DEFAULT_LOCK_TTL,
            lock_wait: DEFAULT_LOCK_WAIT,
            pairing: WaPairing::Qr,
            connector: Arc::new(connector),
            listeners: Listeners::default(),
            patience: Duration::from_secs(5),
        };
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    fn rebuild(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.inner.settings.clone();
        f(&mut settings);
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// The provider's id (`whatsapp-web` by default): give two numbers in one bot different
    /// ids (`whatsapp-web:shop`). With replicas, the session is elected under
    /// `provider:<id>`.
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.rebuild(|s| s.id = id)
    }

    /// Pairs an unlinked session with a pairing code for `phone` (digits with the country
    /// code) instead of a QR code: the code is reported as [`WhatsAppEvent::PairCode`] and
    /// logged, to type on the phone.
    #[must_use]
    pub fn with_pair_code(self, phone: impl Into<String>) -> Self {
        let phone = phone.into();
        self.rebuild(|s| s.pairing = WaPairing::Code { phone })
    }

    /// What is done with each QR code: printed to the terminal by default.
    #[must_use]
    pub fn on_qr(self, handler: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.rebuild(|s| s.listeners.qr = Arc::new(handler))
    }

    /// Adds a handler of the provider's events (pairing, logged out, replaced, status
    /// updates, ...).
    #[must_use]
    pub fn on_event(self, handler: impl Fn(&WhatsAppEvent) + Send + Sync + 'static) -> Self {
        self.rebuild(|s| s.listeners.events.push(Arc::new(handler)))
    }

    /// How long a message the bot cannot take now is offered again before a warning is logged
    /// (5 s by default). It is offered until the bot takes it, the session waiting meanwhile,
    /// or until the provider stops: then it is not acknowledged, and WhatsApp delivers it
    /// again to the replica that opens the session next.
    #[must_use]
    pub fn with_intake_patience(self, patience: Duration) -> Self {
        self.rebuild(|s| s.patience = patience)
    }

    /// How long the lock of a session kept in the store outlives its holder (15 s by default):
    /// renewed every third of it while the session is open, released at stop. A replica that
    /// dies holding it keeps standbys out until it runs out (a standby's `start` waits that long
    /// for it), so keep it at most the lease.
    #[must_use]
    pub fn with_session_lock_ttl(self, ttl: Duration) -> Self {
        self.rebuild(|s| s.lock_ttl = ttl)
    }

    /// How long `start` waits for a session directory's lock held by another opener (the old
    /// leader still stopping) before it gives up (15 s by default; about the lease). The
    /// runtime starts the session once per election, so a standby that gave up waits for the
    /// step-down rule to try again.
    #[must_use]
    pub fn with_session_lock_wait(self, wait: Duration) -> Self {
        self.rebuild(|s| s.lock_wait = wait)
    }

    /// Where the session is kept.
    pub fn session(&self) -> &Session {
        &self.inner.settings.session
    }

    /// The session directory, when the session is kept in one.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.settings.session.dir()
    }

    fn closed(&self) -> Error {
        Error::TransportClosed { provider: self.inner.id.clone() }
    }
}

#[async_trait]
impl Provider for WhatsAppWebProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::exclusive()
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let inner = &self.inner;
        let mut open = inner.open.lock().await;
        if let Some(old) = open.take() {
            // Started again without a stop: the old session goes first.
            close(inner, old).await;
        }
        let settings = &inner.settings;
        let session_lock =
            hold(inner, intake.store()).await.map_err(|e| e.into_contract(&inner.id, None))?;
        let request =
            WaOpen::new(settings.session.clone(), settings.pairing.clone(), inner.id.clone())
                .with_store(intake.store().cloned())
                .with_guard(session_lock.guard());
        let session = match settings.connector.open(request).await {
            Ok(session) => session,
            Err(e) => {
                session_lock.release().await;
                return Err(e.into_contract(&inner.id, None));
            }
        };
        *lock(&inner.client) = Some(Arc::clone(&session.client));
        // The lock may have been lost while the session opened (the store stalled): the
        // session is closed again. A loss from here on closes the client set above.
        if inner.is_lost() || !session_lock.guard().is_held() {
            lock(&inner.client).take();
            session.client.close().await;
            session_lock.release().await;
            let key = crate::store_lock::lock_key(&store_prefix(&inner.id));
            return Err(crate::Error::SessionLocked { key }.into_contract(&inner.id, None));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&inner.events) = Some(tx);
        let pump = tokio::spawn(pump::run(Arc::clone(inner), session.events, intake));
        *open = Some(Open { client: session.client, lock: session_lock, pump });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        });
        Ok(Box::pin(stream.boxed()))
    }

    async fn stop(&self) -> Result<()> {
        let inner = &self.inner;
        let open = inner.open.lock().await.take();
        if let Some(open) = open {
            close(inner, open).await;
        }
        *lock(&inner.status) = TransportStatus::Closed;
        // Ends the stream.
        lock(&inner.events).take();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let inner = &self.inner;
        let chat = message.chat.as_str();
        let outgoing = to_wa(message).map_err(|e| e.into_contract(&inner.id, Some(chat)))?;
        let client = lock(&inner.client).clone().ok_or_else(|| self.closed())?;
        let to = outgoing.chat.clone();
        let id = client.send(outgoing).await.map_err(|e| e.into_contract(&inner.id, Some(chat)))?;
        let key = WaKey::new(to, id).mine();
        Ok(SendReceipt::new(Some(MessageId::from(message_id(&key)))))
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }

    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let inner = &self.inner;
        let client = lock(&inner.client).clone().ok_or_else(|| self.closed())?;
        let mut wa = WaMedia::new(media.url.clone());
        wa.mime.clone_from(&media.mime);
        wa.size = media.size;
        wa.file_name.clone_from(&media.file_name);
        client.download(&wa).await.map_err(|e| e.into_contract(&inner.id, None))
    }
}

/// Takes the session's lock: the directory's lock file, or the fenced lock in the store,
/// whose loss closes the transport.
async fn hold(
    inner: &Arc<Inner>,
    store: Option<&Arc<dyn botmesh_traits::Store>>,
) -> crate::Result<Held> {
    inner.set_lost(false);
    match &inner.settings.session {
        Session::Dir(dir) => {
            SessionLock::acquire_within(dir, inner.settings.lock_wait).await.map(Held::dir)
        }
        Session::Store => {
            let weak = Arc::downgrade(inner);
            let lost = move || {
                let Some(inner) = weak.upgrade() else { return };
                inner.set_lost(true);
                inner.set_status(TransportStatus::Closed);
                // Another replica may hold the session now: this one disconnects at once.
                // Its events end; `stop` (the runtime's step-down) releases the rest.
                let client = lock(&inner.client).take();
                if let Some(client) = client {
                    tokio::spawn(async move { client.close().await });
                }
            };
            let prefix = store_prefix(&inner.id);
            StoreLock::acquire(store, &prefix, inner.settings.lock_ttl, lost).await.map(Held::Store)
        }
    }
}

/// Closes an open session: the pump first, then the client, then the lock.
async fn close(inner: &Inner, open: Open) {
    lock(&inner.client).take();
    // A pump still handing a message to the bot is stopped first, so that the client's
    // shutdown does not wait for it: its batch was not acknowledged, so WhatsApp delivers it
    // again to the next opener.
    open.pump.abort();
    let _ = open.pump.await;
    open.client.close().await;
    open.lock.release().await;
}
