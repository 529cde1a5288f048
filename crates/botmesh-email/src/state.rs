//! What a provider's clones share: its settings, and what it holds while started.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use botmesh_traits::webhook::{IntakeSlot, Limits};
use botmesh_traits::{ProviderEvent, Store, TransportStatus};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::archive::Archive;
use crate::config::{ImapConfig, SmtpConfig, Threading};
use crate::smtp::Smtp;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How an ingest request proves it comes from the mail service.
#[derive(Clone)]
pub(crate) enum Check {
    /// The secret itself, in the `X-Botmesh-Secret` header.
    Secret(Arc<[u8]>),
    /// `sha256=<hex>` of the HMAC-SHA256 of the body, in the `X-Botmesh-Signature` header.
    Hmac(Arc<[u8]>),
}

/// How mail reaches the provider.
#[derive(Clone)]
pub(crate) enum Mode {
    /// One IMAP session, on the elected replica.
    Imap(Box<ImapConfig>),
    /// Raw mails posted to the ingest endpoint at `path`, on every replica.
    Ingest { check: Check, path: String },
}

/// What a provider is set up with, before it is shared.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) id: String,
    pub(crate) mode: Mode,
    pub(crate) smtp: SmtpConfig,
    pub(crate) threading: Threading,
    pub(crate) limits: Limits,
    pub(crate) retention: Duration,
    /// How long `stop` waits for the IMAP session to log out.
    pub(crate) stop_timeout: Duration,
    /// Where mails are kept, when given rather than adopted from the bot at start.
    pub(crate) store: Option<Arc<dyn Store>>,
}

/// The IMAP loop while it runs: its task and the switch that stops it.
pub(crate) struct Running {
    pub(crate) task: JoinHandle<()>,
    pub(crate) stop: watch::Sender<bool>,
}

/// What the provider's clones share.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) id: String,
    pub(crate) archive: Archive,
    pub(crate) smtp: OnceLock<Result<Smtp, String>>,
    /// The bot's intake while started (ingest).
    pub(crate) slot: IntakeSlot,
    pub(crate) events: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    pub(crate) status: Mutex<TransportStatus>,
    pub(crate) running: Mutex<Option<Running>>,
}

impl Inner {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            id: settings.id.clone(),
            archive: Archive::new(&settings.id, settings.retention, settings.store.clone()),
            settings,
            smtp: OnceLock::new(),
            slot: IntakeSlot::new(),
            events: Mutex::new(None),
            status: Mutex::new(TransportStatus::Closed),
            running: Mutex::new(None),
        }
    }

    /// Reports `event` on the inbound stream, while started.
    pub(crate) fn report(&self, event: ProviderEvent) {
        if let Some(tx) = lock(&self.events).as_ref() {
            let _ = tx.send(event);
        }
    }

    /// Reports a mail that did not reach the bot, and logs it.
    pub(crate) fn reject(&self, reason: String) {
        tracing::warn!(target: "botmesh", provider = self.id, reason, "mail not handed to the bot");
        self.report(ProviderEvent::Rejected { reason });
    }

    /// Records and reports the transport's status, when it changed.
    pub(crate) fn set_status(&self, status: TransportStatus) {
        let changed = std::mem::replace(&mut *lock(&self.status), status) != status;
        if changed {
            self.report(ProviderEvent::Status(status));
        }
    }
}
