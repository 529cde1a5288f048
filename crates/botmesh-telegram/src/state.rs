//! What a provider's clones share: its mode, its client, and what it holds while started.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::webhook::{IntakeSlot, Limits};
use botmesh_traits::{ProviderEvent, TransportStatus};
use teloxide_core::Bot;
use teloxide_core::types::ParseMode;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::pauses::Pauses;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How updates reach this provider.
#[derive(Clone)]
pub(crate) enum Mode {
    /// `getUpdates` in a loop, waiting up to `timeout` for each batch.
    Polling { timeout: Duration },
    /// Telegram posts each update to `url`, signed with `secret`.
    Webhook { url: url::Url, secret: Arc<str> },
}

impl std::fmt::Debug for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        match self {
            Self::Polling { timeout } => {
                f.debug_struct("Polling").field("timeout", timeout).finish()
            }
            Self::Webhook { url, .. } => {
                f.debug_struct("Webhook").field("url", url).finish_non_exhaustive()
            }
        }
    }
}

/// What a provider is set up with, before it is shared.
pub(crate) struct Settings {
    pub(crate) id: String,
    pub(crate) bot: Bot,
    pub(crate) mode: Mode,
    pub(crate) parse_mode: Option<ParseMode>,
    pub(crate) limits: Limits,
}

/// What the provider's clones share.
pub(crate) struct Inner {
    pub(crate) id: String,
    pub(crate) bot: Bot,
    pub(crate) mode: Mode,
    pub(crate) parse_mode: Option<ParseMode>,
    pub(crate) limits: Limits,
    /// The bot's intake while started.
    pub(crate) slot: IntakeSlot,
    /// The bot's username, from `getMe`: stripped from `/command@username`.
    pub(crate) username: Mutex<Option<String>>,
    /// The events the provider reports, while started.
    pub(crate) events: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    pub(crate) status: Mutex<TransportStatus>,
    /// The long-polling loop, while it runs here.
    pub(crate) poller: Mutex<Option<Poller>>,
    /// What Telegram asked to wait for after a `429`.
    pub(crate) pauses: Pauses,
}

impl Inner {
    pub(crate) fn new(s: Settings) -> Self {
        Self {
            id: s.id,
            bot: s.bot,
            mode: s.mode,
            parse_mode: s.parse_mode,
            limits: s.limits,
            slot: IntakeSlot::new(),
            username: Mutex::new(None),
            events: Mutex::new(None),
            status: Mutex::new(TransportStatus::Closed),
            poller: Mutex::new(None),
            pauses: Pauses::default(),
        }
    }

    /// The settings this provider was made with.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            id: self.id.clone(),
            bot: self.bot.clone(),
            mode: self.mode.clone(),
            parse_mode: self.parse_mode,
            limits: self.limits,
        }
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
            self.report(ProviderEvent::Status(status));
        }
    }

    pub(crate) fn username(&self) -> Option<String> {
        lock(&self.username).clone()
    }
}

/// A running long-polling loop, and the signal that asks it to stop.
pub(crate) struct Poller {
    pub(crate) task: JoinHandle<()>,
    pub(crate) stop: watch::Sender<bool>,
}

impl Poller {
    /// Stops the loop where nothing is lost or repeated: at once while it waits on Telegram,
    /// else once the updates it handed to the bot are recorded in the store. Aborted after
    /// `within`, for a store that does not answer: the next poller then gets those updates
    /// again, and the bot's dedupe drops them (its journal, with durability).
    pub(crate) async fn stop(self, within: Duration) {
        let Self { mut task, stop } = self;
        // Sent, then dropped: every wait of the loop on it ends, seen or not.
        let _ = stop.send(true);
        drop(stop);
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
        }
    }
}
