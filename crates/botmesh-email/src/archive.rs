//! What the provider keeps of each mail it handed to the bot, in the bot's shared store: the
//! whole mail (for `fetch_media`: the raw mail, its HTML, its attachments) and what a reply
//! needs to stay in its thread (`Message-ID`, `References`, subject). Every replica reads the
//! same rows, so a reply sent by any replica is threaded.
//!
//! Rows expire after the provider's retention (seven days by default). Without a store (a
//! provider outside a bot) the last 1024 mails are kept in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use botmesh_traits::{CheckpointWrite, Store};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One mail, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kept {
    /// Its `Message-ID`, without angle brackets (for `In-Reply-To`; the row is keyed by the
    /// message id, which also covers the sender: see `parse::message_key`).
    pub(crate) id: String,
    /// Its subject.
    pub(crate) subject: Option<String>,
    /// Its `References`, oldest first, without angle brackets.
    pub(crate) references: Vec<String>,
    /// The whole mail, base64.
    #[serde(default)]
    pub(crate) raw: String,
}

impl Kept {
    /// The raw mail.
    pub(crate) fn raw(&self) -> Option<Vec<u8>> {
        STANDARD.decode(&self.raw).ok()
    }

    pub(crate) fn encode(raw: &[u8]) -> String {
        STANDARD.encode(raw)
    }
}

const LOCAL: usize = 1024;

#[derive(Default)]
struct Local {
    rows: HashMap<String, String>,
    order: VecDeque<String>,
}

/// The rows of one provider.
pub(crate) struct Archive {
    provider: String,
    retention: Duration,
    store: Mutex<Option<Arc<dyn Store>>>,
    local: Mutex<Local>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A short, key-safe digest of `s`.
fn digest(s: &str) -> String {
    let hash = Sha256::digest(s.as_bytes());
    hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

impl Archive {
    pub(crate) fn new(provider: &str, retention: Duration, store: Option<Arc<dyn Store>>) -> Self {
        Self {
            provider: provider.to_owned(),
            retention,
            store: Mutex::new(store),
            local: Mutex::default(),
        }
    }

    /// Uses the bot's store from now on (given at start), unless one was set already.
    pub(crate) fn adopt(&self, store: Option<&Arc<dyn Store>>) {
        let mut kept = lock(&self.store);
        if kept.is_none() {
            *kept = store.cloned();
        }
    }

    fn mail_key(&self, id: &str) -> String {
        format!("botmesh:provider:{}:mail:{}", self.provider, digest(id))
    }

    fn chat_key(&self, chat: &str) -> String {
        format!("botmesh:provider:{}:chat:{}", self.provider, digest(chat))
    }

    async fn put(&self, key: String, data: String) -> botmesh_traits::Result<()> {
        let store = lock(&self.store).clone();
        match store {
            Some(store) => {
                let write = CheckpointWrite::new(data).with_ttl(self.retention);
                store.set_checkpoint(&key, &write).await.map(|_| ())
            }
            None => {
                let mut local = lock(&self.local);
                if local.rows.insert(key.clone(), data).is_none() {
                    local.order.push_back(key);
                }
                while local.order.len() > LOCAL {
                    if let Some(old) = local.order.pop_front() {
                        local.rows.remove(&old);
                    }
                }
                Ok(())
            }
        }
    }

    async fn get(&self, key: &str) -> Option<Kept> {
        let store = lock(&self.store).clone();
        let data = match store {
            Some(store) => store.get_checkpoint(key).await.ok().flatten().map(|r| r.data),
            None => lock(&self.local).rows.get(key).cloned(),
        };
        data.and_then(|d| serde_json::from_str(&d).ok())
    }

    /// Keeps `mail`, message `id`, received in `chat`, before it is handed to the bot. The
    /// row is keyed by `id`, unique to the sender and the `Message-ID`: another sender's mail
    /// with the same `Message-ID` cannot replace it.
    pub(crate) async fn keep(
        &self,
        id: &str,
        chat: &str,
        mail: &Kept,
    ) -> botmesh_traits::Result<()> {
        let whole = serde_json::to_string(mail).unwrap_or_default();
        self.put(self.mail_key(id), whole).await?;
        let head = Kept { raw: String::new(), ..mail.clone() };
        let head = serde_json::to_string(&head).unwrap_or_default();
        self.put(self.chat_key(chat), head).await
    }

    /// The mail with message id `id`.
    pub(crate) async fn mail(&self, id: &str) -> Option<Kept> {
        self.get(&self.mail_key(id)).await
    }

    /// The last mail received in `chat` (without its body).
    pub(crate) async fn last_in(&self, chat: &str) -> Option<Kept> {
        self.get(&self.chat_key(chat)).await
    }
}
