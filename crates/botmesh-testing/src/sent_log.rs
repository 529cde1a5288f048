//! What a test provider's bot sent, in order, with a wait for more.

use std::sync::{Mutex, MutexGuard, PoisonError};

use botmesh_traits::Outbound;
use tokio::sync::Notify;

/// The messages a bot sent through a test provider, as its users received them.
#[derive(Debug, Default)]
pub(crate) struct SentLog {
    sent: Mutex<Vec<Outbound>>,
    changed: Notify,
}

impl SentLog {
    fn lock(&self) -> MutexGuard<'_, Vec<Outbound>> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a sent message; returns how many were sent in all.
    pub(crate) fn push(&self, message: &Outbound) -> usize {
        let n = {
            let mut sent = self.lock();
            sent.push(message.clone());
            sent.len()
        };
        self.changed.notify_waiters();
        n
    }

    pub(crate) fn all(&self) -> Vec<Outbound> {
        self.lock().clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn take(&self) -> Vec<Outbound> {
        std::mem::take(&mut *self.lock())
    }

    /// The texts sent to `chat`, in order.
    pub(crate) fn texts_to(&self, chat: &str) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|m| m.chat.as_str() == chat)
            .filter_map(|m| m.text_body().map(str::to_owned))
            .collect()
    }

    /// Waits until at least `n` messages were sent in all.
    pub(crate) async fn wait(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            if self.count() >= n {
                return;
            }
            changed.await;
        }
    }
}
