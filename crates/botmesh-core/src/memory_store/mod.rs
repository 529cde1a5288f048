//! A [`Store`] kept in the memory of one process. `journal.rs` holds its inbox journal and
//! outbox.

mod journal;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error, FencedLock,
    JournalStore, LeaseGrant, LeaseStore, LockStore, Result, Store, TaskStore, async_trait,
};
use tokio::time::Instant;

use self::journal::Journal;

/// A store in the memory of one process: fast, and gone when the process ends.
///
/// It implements [`Store`] and every capability trait ([`CasStore`], [`LockStore`],
/// [`LeaseStore`], [`TaskStore`], [`JournalStore`]), atomically (one mutex), so it also serves
/// as the reference for other stores. Times to live follow tokio's clock, so tests with paused time
/// see entries expire without waiting.
///
/// Bots that share one `MemoryStore` value (tests with several replicas in one process) share
/// its data; bots in different processes do not.
///
/// ```
/// use std::sync::Arc;
///
/// use botmesh_core::traits::Store;
/// use botmesh_core::{Bot, MemoryStore};
/// # use botmesh_testing::TestProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryStore::new());
/// let a = Bot::builder().provider(TestProvider::new()).store(store.clone()).build()?;
/// let b = Bot::builder().provider(TestProvider::new()).store(store).build()?;
/// a.store().set_user_data("ada", r#"{"vip":true}"#).await?;
/// assert_eq!(b.store().get_user_data("ada").await?.as_deref(), Some(r#"{"vip":true}"#));
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    chats: HashMap<ChatId, ChatRecord>,
    users: HashMap<String, String>,
    checkpoints: HashMap<String, Checkpoint>,
    /// Last revision per key, kept across clears so revisions never repeat.
    revisions: HashMap<String, u64>,
    locks: HashMap<String, Lock>,
    fences: HashMap<String, u64>,
    leases: HashMap<String, Lease>,
    /// The inbox journal and the outbox (see `journal.rs`).
    journal: Journal,
    /// The last occurrence claimed of each durable task.
    tasks: HashMap<String, u64>,
}

#[derive(Debug)]
struct Checkpoint {
    data: String,
    revision: u64,
    expires: Option<Instant>,
}

#[derive(Debug)]
struct Lock {
    token: String,
    expires: Instant,
}

#[derive(Debug)]
struct Lease {
    holder: String,
    fence: u64,
    expires: Instant,
}

fn live(expires: Option<Instant>, now: Instant) -> bool {
    expires.is_none_or(|e| e > now)
}

impl Inner {
    fn checkpoint(&mut self, key: &str, now: Instant) -> Option<&Checkpoint> {
        if self.checkpoints.get(key).is_some_and(|c| !live(c.expires, now)) {
            self.checkpoints.remove(key);
        }
        self.checkpoints.get(key)
    }

    fn write_checkpoint(&mut self, key: &str, write: &CheckpointWrite, now: Instant) -> u64 {
        let rev = self.revisions.entry(key.to_owned()).or_insert(0);
        *rev += 1;
        let revision = *rev;
        let expires = write.ttl.map(|t| now + t);
        self.checkpoints
            .insert(key.to_owned(), Checkpoint { data: write.data.clone(), revision, expires });
        revision
    }

    fn lock_held(&mut self, key: &str, now: Instant) -> Option<&Lock> {
        if self.locks.get(key).is_some_and(|l| l.expires <= now) {
            self.locks.remove(key);
        }
        self.locks.get(key)
    }

    fn lease_held(&mut self, name: &str, now: Instant) -> Option<&mut Lease> {
        self.leases.get_mut(name).filter(|l| l.expires > now)
    }

    fn next_fence(&mut self, key: &str) -> u64 {
        let f = self.fences.entry(key.to_owned()).or_insert(0);
        *f += 1;
        *f
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        // A poisoned lock means a panic inside one of the short critical sections below, which
        // hold no user code; report it instead of propagating the panic.
        self.inner.lock().map_err(|_| Error::store("lock", "memory store lock poisoned"))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn cas(&self) -> Option<&dyn CasStore> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn LockStore> {
        Some(self)
    }

    fn leases(&self) -> Option<&dyn LeaseStore> {
        Some(self)
    }

    fn tasks(&self) -> Option<&dyn TaskStore> {
        Some(self)
    }

    fn journal(&self) -> Option<&dyn JournalStore> {
        Some(self)
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
        let mut g = self.lock()?;
        match g.chats.get_mut(&chat.id) {
            Some(existing) => {
                existing.last_seen_ms = chat.last_seen_ms.max(existing.last_seen_ms);
                existing.provider.clone_from(&chat.provider);
                if chat.lang.is_some() {
                    existing.lang.clone_from(&chat.lang);
                }
            }
            None => {
                g.chats.insert(chat.id.clone(), chat.clone());
            }
        }
        Ok(())
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        Ok(self.lock()?.chats.get(id).cloned())
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        Ok(self.lock()?.users.get(key).cloned())
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        self.lock()?.users.insert(key.to_owned(), data.to_owned());
        Ok(())
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let now = Instant::now();
        let mut g = self.lock()?;
        Ok(g.checkpoint(key, now).map(|c| CheckpointRecord::new(c.data.clone(), c.revision)))
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        let now = Instant::now();
        Ok(self.lock()?.write_checkpoint(key, write, now))
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        self.lock()?.checkpoints.remove(key);
        Ok(())
    }
}

#[async_trait]
impl CasStore for MemoryStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let now = Instant::now();
        let mut g = self.lock()?;
        let current = g.checkpoint(key, now).map(|c| c.revision);
        if current != expected {
            return Ok(CasOutcome::Conflict { current });
        }
        Ok(CasOutcome::Written { revision: g.write_checkpoint(key, write, now) })
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let now = Instant::now();
        let mut g = self.lock()?;
        if g.checkpoint(key, now).map(|c| c.revision) != Some(expected) {
            return Ok(false);
        }
        g.checkpoints.remove(key);
        Ok(true)
    }
}

#[async_trait]
impl LockStore for MemoryStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let now = Instant::now();
        let mut g = self.lock()?;
        if g.lock_held(key, now).is_some() {
            return Ok(None);
        }
        let fence = g.next_fence(&format!("lock:{key}"));
        let token = uuid::Uuid::new_v4().to_string();
        g.locks.insert(key.to_owned(), Lock { token: token.clone(), expires: now + ttl });
        Ok(Some(FencedLock::new(token, fence)))
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let now = Instant::now();
        let mut g = self.lock()?;
        match g.locks.get_mut(key) {
            Some(l) if l.token == token && l.expires > now => {
                l.expires = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        let now = Instant::now();
        let mut g = self.lock()?;
        if g.lock_held(key, now).is_some_and(|l| l.token == token) {
            g.locks.remove(key);
            return Ok(true);
        }
        Ok(false)
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let now = Instant::now();
        let mut g = self.lock()?;
        if let Some(l) = g.lease_held(name, now) {
            if l.holder != holder {
                return Ok(None);
            }
            l.expires = now + ttl;
            return Ok(Some(LeaseGrant::new(l.fence)));
        }
        let fence = g.next_fence(&format!("lease:{name}"));
        g.leases.insert(
            name.to_owned(),
            Lease { holder: holder.to_owned(), fence, expires: now + ttl },
        );
        Ok(Some(LeaseGrant::new(fence)))
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let now = Instant::now();
        let mut g = self.lock()?;
        match g.lease_held(name, now) {
            Some(l) if l.holder == holder => {
                l.expires = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let now = Instant::now();
        let mut g = self.lock()?;
        if g.lease_held(name, now).is_some_and(|l| l.holder == holder) {
            g.leases.remove(name);
            return Ok(true);
        }
        Ok(false)
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        Ok(self.lock()?.tasks.get(id).copied())
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        let mut g = self.lock()?;
        if g.tasks.get(id).is_some_and(|last| *last >= occurrence) {
            return Ok(false);
        }
        g.tasks.insert(id.to_owned(), occurrence);
        Ok(true)
    }
}
