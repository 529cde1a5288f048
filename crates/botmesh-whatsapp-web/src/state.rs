//! What a provider's clones share: its settings, and the session while it is open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::{ProviderEvent, TransportStatus};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::events::{Listeners, WhatsAppEvent};
use crate::seam::{Session, WaClient, WaConnector, WaPairing};
use crate::session::Held;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a provider is set up with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) id: String,
    pub(crate) session: Session,
    /// The time to live of the session's lock in the store.
    pub(crate) lock_ttl: Duration,
    /// How long an opener waits for the lock file of a session directory held by another.
    pub(crate) lock_wait: Duration,
    pub(crate) pairing: WaPairing,
    pub(crate) connector: Arc<dyn WaConnector>,
    pub(crate) listeners: Listeners,
    pub(crate) patience: Duration,
}

/// The open session.
pub(crate) struct Open {
    pub(crate) client: Arc<dyn WaClient>,
    pub(crate) lock: Held,
    pub(crate) pump: JoinHandle<()>,
}

/// What the provider's clones share.
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) id: String,
    pub(crate) open: tokio::sync::Mutex<Option<Open>>,
    /// The client of the open session, for sends that must not wait behind `start`/`stop`.
    pub(crate) client: Mutex<Option<Arc<dyn WaClient>>>,
    pub(crate) events: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    pub(crate) status: Mutex<TransportStatus>,
    /// The session's lock was lost since `start`: the transport stays closed, whatever the
    /// client still reports (a `Connected` queued before the loss).
    lost: AtomicBool,
}

impl Inner {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            id: settings.id.clone(),
            settings,
            open: tokio::sync::Mutex::new(None),
            client: Mutex::new(None),
            events: Mutex::new(None),
            status: Mutex::new(TransportStatus::Closed),
            lost: AtomicBool::new(false),
        }
    }

    /// Reports an event on the inbound stream, while started.
    pub(crate) fn report(&self, event: ProviderEvent) {
        if let Some(tx) = lock(&self.events).as_ref() {
            let _ = tx.send(event);
        }
    }

    /// Tells the operator.
    pub(crate) fn notify(&self, event: &WhatsAppEvent) {
        self.settings.listeners.emit(&self.id, event);
    }

    /// Whether the session's lock was lost since `start`.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Records that the session's lock was lost (`true`), or that a new `start` holds it.
    pub(crate) fn set_lost(&self, lost: bool) {
        self.lost.store(lost, Ordering::SeqCst);
    }

    /// The client connected: the transport is open, unless the session's lock was lost.
    pub(crate) fn connected(&self) {
        if !self.is_lost() {
            self.set_status(TransportStatus::Open);
        }
    }

    /// Records and reports the transport's status, when it changed.
    pub(crate) fn set_status(&self, status: TransportStatus) {
        let changed = std::mem::replace(&mut *lock(&self.status), status) != status;
        if changed {
            self.report(ProviderEvent::Status(status));
        }
    }
}
