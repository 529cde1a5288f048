//! How to write your own store: [`MapStore`] keeps a bot's state in a `HashMap` behind a
//! `Mutex`, and opts into one capability, compare-and-set checkpoints.
//!
//! Read it top to bottom. A store has two parts:
//!
//! 1. [`Store`], required: chats, user data and conversation checkpoints, the seven methods a
//!    bot of one process needs.
//! 2. Capability traits, optional: [`CasStore`] (compare-and-set checkpoints), `LockStore`,
//!    `LeaseStore`, `TaskStore` and `JournalStore`. A store implements the ones it can and
//!    returns `Some(self)` from the matching accessor of [`Store`] (`cas`, `locks`, `leases`,
//!    `tasks`, `journal`); the runtime asks the accessors and uses what it finds.
//!
//! `tests/conformance.rs` runs botmesh's store conformance suite against it: the required
//! methods, and the checks of every capability the accessors claim.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error, Result,
    Store, async_trait,
};

/// A store in the memory of one process, gone when the process ends.
#[derive(Debug, Default)]
pub struct MapStore {
    // One lock around all the data: every method is then one atomic step, which is all that
    // compare-and-set needs. A store on a database gets the same from a transaction or a
    // conditional statement.
    data: Mutex<Data>,
}

#[derive(Debug, Default)]
struct Data {
    chats: HashMap<ChatId, ChatRecord>,
    users: HashMap<String, String>,
    checkpoints: HashMap<String, Row>,
    /// The last revision handed out. One counter for every key, so a key's revisions strictly
    /// increase, also across a clear: a writer holding a stale revision never matches again.
    last_revision: u64,
}

/// A checkpoint as kept here.
#[derive(Debug)]
struct Row {
    data: String,
    revision: u64,
    /// When the row disappears, if the write set a time to live.
    expires: Option<Instant>,
}

impl MapStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn data(&self) -> Result<MutexGuard<'_, Data>> {
        // Poisoned only by a panic while the lock was held; report it as the store failing.
        self.data.lock().map_err(|_| Error::store("lock", "the store's lock is poisoned"))
    }
}

impl Data {
    /// The row of `key`, unless it is missing or expired: an expired row behaves exactly as a
    /// missing one, so it is dropped here.
    fn row(&mut self, key: &str) -> Option<&Row> {
        let expired = self.checkpoints.get(key).and_then(|row| row.expires);
        if expired.is_some_and(|t| t <= Instant::now()) {
            self.checkpoints.remove(key);
        }
        self.checkpoints.get(key)
    }

    /// Writes row `key` with the next revision, and returns it.
    fn write(&mut self, key: &str, write: &CheckpointWrite) -> u64 {
        self.last_revision += 1;
        let row = Row {
            data: write.data.clone(),
            revision: self.last_revision,
            expires: write.ttl.map(|ttl| Instant::now() + ttl),
        };
        self.checkpoints.insert(key.to_owned(), row);
        self.last_revision
    }
}

#[async_trait]
impl Store for MapStore {
    // Opting in: this store has compare-and-set. Leaving this out would leave `CasStore` below
    // unused; returning `Some(self)` without it would not compile.
    fn cas(&self) -> Option<&dyn CasStore> {
        Some(self)
    }

    // `shared` stays `false` (the default): no other process sees this memory, so a bot with
    // several replicas cannot share it.

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
        let mut data = self.data()?;
        match data.chats.get_mut(&chat.id) {
            // Seen before: keep `first_seen_ms`, and a language the update does not know.
            Some(known) => {
                known.last_seen_ms = chat.last_seen_ms;
                known.provider.clone_from(&chat.provider);
                if chat.lang.is_some() {
                    known.lang.clone_from(&chat.lang);
                }
            }
            None => {
                data.chats.insert(chat.id.clone(), chat.clone());
            }
        }
        Ok(())
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        Ok(self.data()?.chats.get(id).cloned())
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        Ok(self.data()?.users.get(key).cloned())
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        self.data()?.users.insert(key.to_owned(), data.to_owned());
        Ok(())
    }

    // Checkpoints are opaque JSON text written by the runtime: keep them as they are.
    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let mut data = self.data()?;
        Ok(data.row(key).map(|row| CheckpointRecord::new(row.data.clone(), row.revision)))
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        Ok(self.data()?.write(key, write))
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        self.data()?.checkpoints.remove(key);
        Ok(())
    }
}

// The capability: a write or a clear that lands only over the revision the writer last saw.
// Under coordination, the runtime writes every checkpoint this way, so a replica that stalled
// past its turn cannot overwrite a newer one.
#[async_trait]
impl CasStore for MapStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        // Read and write under one lock: nobody writes in between.
        let mut data = self.data()?;
        let current = data.row(key).map(|row| row.revision);
        if current != expected {
            return Ok(CasOutcome::Conflict { current });
        }
        Ok(CasOutcome::Written { revision: data.write(key, write) })
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let mut data = self.data()?;
        if data.row(key).is_none_or(|row| row.revision != expected) {
            // A newer row (or none): leave it.
            return Ok(false);
        }
        data.checkpoints.remove(key);
        Ok(true)
    }
}
