//! The session's rows in the bot's store: one checkpoint row per entry, a write-through cache
//! in front of them, and index rows for the collections that must be listed or swept.
//!
//! A row is `<prefix><table>:<id>`; its data is JSON, or base64 for raw records. An index is
//! `<prefix>index:<table>`, a JSON object from each entry's id to a number (a time stamp for
//! the collections swept by age, `0` otherwise), updated by compare-and-set on its revision.
//! Only the leader writes (the lease, and the session's lock under it), so the cache never
//! goes stale: after the first read of an entry, reads stay local.
//!
//! The tables of one row per message ([`UNCACHED`]: messages waiting for the bot, sent
//! messages kept for retries, base keys, message secrets) are read about once each, so they
//! are not cached: the cache holds the session's long-lived entries only, and a deleted row
//! leaves it. An index entry is written before its row, so that a failed index write never
//! leaves a row no sweep can find; a row whose write failed after its index entry is only a
//! missing row to the sweep.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use botmesh_traits::{CasOutcome, CheckpointWrite, Error, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;
use whatsapp_rust::wacore::store::error::{Result, StoreError};

use crate::seam::SessionGuard;

use super::device::SECRET;
use super::protocol::{BASE_KEY, PENDING, SENT};

/// The tables of one row per message, read about once: not cached.
pub(crate) const UNCACHED: &[&str] = &[PENDING, SENT, BASE_KEY, SECRET];

/// How often an index write that lost a race is tried again.
const RACES: usize = 5;

/// An index: each entry's id and its number.
pub(crate) type Index = BTreeMap<String, i64>;

/// Writing after the session's lock was lost or released.
#[derive(Debug, thiserror::Error)]
#[error("the session's lock is no longer held; the write was refused")]
pub(crate) struct NotHeld;

/// An index that kept changing under this writer.
#[derive(Debug, thiserror::Error)]
#[error("the index {0} kept changing under this writer")]
struct Contended(String);

fn store_error(e: Error) -> StoreError {
    StoreError::Database(Box::new(e))
}

fn decode_error(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Serialization(Box::new(e))
}

/// A row as last seen: its data (`None`: no row) and revision (`None`: unknown).
#[derive(Clone)]
struct Cached {
    data: Option<String>,
    revision: Option<u64>,
}

/// The session's rows under one prefix.
pub(crate) struct Rows {
    store: Arc<dyn Store>,
    prefix: String,
    guard: SessionGuard,
    cache: Mutex<HashMap<String, Cached>>,
    /// Serializes this process's index updates; other processes are kept out by
    /// compare-and-set.
    indexes: tokio::sync::Mutex<()>,
}

impl Rows {
    pub(crate) fn new(store: Arc<dyn Store>, prefix: String, guard: SessionGuard) -> Self {
        Self {
            store,
            prefix,
            guard,
            cache: Mutex::new(HashMap::new()),
            indexes: tokio::sync::Mutex::new(()),
        }
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<String, Cached>> {
        // No code that can panic runs under this lock.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(&self, table: &str, id: &str) -> String {
        format!("{}{table}:{id}", self.prefix)
    }

    fn index_key(&self, table: &str) -> String {
        format!("{}index:{table}", self.prefix)
    }

    /// Whether the row `key` is kept in the cache: not one of the [`UNCACHED`] tables'.
    fn cacheable(&self, key: &str) -> bool {
        let table = key.strip_prefix(&self.prefix).and_then(|k| k.split_once(':'));
        !table.is_some_and(|(table, _)| UNCACHED.contains(&table))
    }

    /// How many rows the cache holds.
    #[cfg(test)]
    pub(crate) fn cached_rows(&self) -> usize {
        self.cache().len()
    }

    fn held(&self) -> Result<()> {
        if self.guard.is_held() { Ok(()) } else { Err(StoreError::Database(Box::new(NotHeld))) }
    }

    async fn row(&self, key: &str) -> Result<Cached> {
        if let Some(hit) = self.cache().get(key).cloned() {
            return Ok(hit);
        }
        let row = self.store.get_checkpoint(key).await.map_err(store_error)?;
        let cached = match row {
            Some(r) => Cached { data: Some(r.data), revision: Some(r.revision) },
            None => Cached { data: None, revision: None },
        };
        if !self.cacheable(key) {
            return Ok(cached);
        }
        // A write of this process that landed while the row was read is newer: it stays.
        Ok(self.cache().entry(key.to_owned()).or_insert(cached).clone())
    }

    async fn write(&self, key: String, data: String) -> Result<()> {
        self.held()?;
        match self.store.set_checkpoint(&key, &CheckpointWrite::new(data.clone())).await {
            Ok(revision) => {
                if self.cacheable(&key) {
                    let row = Cached { data: Some(data), revision: Some(revision) };
                    self.cache().insert(key, row);
                }
                Ok(())
            }
            Err(e) => Err(self.unknown(key, e)),
        }
    }

    async fn remove(&self, key: String) -> Result<()> {
        self.held()?;
        match self.store.clear_checkpoint(&key).await {
            Ok(()) => {
                // No placeholder: a deleted row leaves the cache.
                self.cache().remove(&key);
                Ok(())
            }
            Err(e) => Err(self.unknown(key, e)),
        }
    }

    /// A write to `key` failed, and may have landed all the same: the row is read from the
    /// store again next time.
    fn unknown(&self, key: String, e: Error) -> StoreError {
        self.cache().remove(&key);
        store_error(e)
    }

    /// The text of entry `id` of `table`.
    pub(crate) async fn get_text(&self, table: &str, id: &str) -> Result<Option<String>> {
        Ok(self.row(&self.key(table, id)).await?.data)
    }

    /// Writes the text of entry `id` of `table`.
    pub(crate) async fn put_text(&self, table: &str, id: &str, text: String) -> Result<()> {
        self.write(self.key(table, id), text).await
    }

    /// Entry `id` of `table`, decoded from JSON.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        table: &str,
        id: &str,
    ) -> Result<Option<T>> {
        match self.get_text(table, id).await? {
            Some(text) => serde_json::from_str(&text).map(Some).map_err(decode_error),
            None => Ok(None),
        }
    }

    /// Writes entry `id` of `table` as JSON.
    pub(crate) async fn put<T: Serialize + ?Sized>(
        &self,
        table: &str,
        id: &str,
        value: &T,
    ) -> Result<()> {
        let text = serde_json::to_string(value).map_err(decode_error)?;
        self.put_text(table, id, text).await
    }

    /// Entry `id` of `table`, a raw record.
    pub(crate) async fn get_bytes(&self, table: &str, id: &str) -> Result<Option<Vec<u8>>> {
        match self.get_text(table, id).await? {
            Some(text) => B64.decode(text).map(Some).map_err(decode_error),
            None => Ok(None),
        }
    }

    /// Writes entry `id` of `table`, a raw record.
    pub(crate) async fn put_bytes(&self, table: &str, id: &str, bytes: &[u8]) -> Result<()> {
        self.put_text(table, id, B64.encode(bytes)).await
    }

    /// Deletes entry `id` of `table`.
    pub(crate) async fn delete(&self, table: &str, id: &str) -> Result<()> {
        self.remove(self.key(table, id)).await
    }

    /// The index of `table`.
    pub(crate) async fn index(&self, table: &str) -> Result<Index> {
        let row = self.row(&self.index_key(table)).await?;
        match row.data {
            Some(text) => serde_json::from_str(&text).map_err(decode_error),
            None => Ok(Index::new()),
        }
    }

    /// Changes the index of `table` with `change`, which says whether it changed anything:
    /// read, changed and written back by compare-and-set, again if another writer came
    /// between. A store without compare-and-set gets a plain write.
    pub(crate) async fn update_index(
        &self,
        table: &str,
        change: impl Fn(&mut Index) -> bool,
    ) -> Result<()> {
        self.held()?;
        let key = self.index_key(table);
        let _one_at_a_time = self.indexes.lock().await;
        for _ in 0..RACES {
            let row = self.row(&key).await?;
            let mut index: Index = match &row.data {
                Some(text) => serde_json::from_str(text).map_err(decode_error)?,
                None => Index::new(),
            };
            if !change(&mut index) {
                return Ok(());
            }
            let data = serde_json::to_string(&index).map_err(decode_error)?;
            let write = CheckpointWrite::new(data.clone());
            let written = match self.store.cas() {
                Some(cas) => cas.set_checkpoint_if(&key, &write, row.revision).await,
                None => {
                    let revision = self.store.set_checkpoint(&key, &write).await;
                    revision.map(|revision| CasOutcome::Written { revision })
                }
            };
            let revision = match written {
                Ok(CasOutcome::Written { revision }) => revision,
                Ok(_) => {
                    // Someone else wrote it: read it again.
                    self.cache().remove(&key);
                    continue;
                }
                Err(e) => return Err(self.unknown(key, e)),
            };
            self.cache().insert(key, Cached { data: Some(data), revision: Some(revision) });
            return Ok(());
        }
        Err(StoreError::Database(Box::new(Contended(key))))
    }

    /// Adds `ids` to the index of `table`, with their numbers.
    pub(crate) async fn index_add(&self, table: &str, ids: &[(String, i64)]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.update_index(table, |index| {
            let mut changed = false;
            for (id, n) in ids {
                changed |= index.insert(id.clone(), *n) != Some(*n);
            }
            changed
        })
        .await
    }

    /// Removes `ids` from the index of `table`.
    pub(crate) async fn index_remove(&self, table: &str, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.update_index(table, |index| {
            let mut changed = false;
            for id in ids {
                changed |= index.remove(id).is_some();
            }
            changed
        })
        .await
    }

    /// Deletes the entries of `table` whose index number `expired` says, and returns how
    /// many.
    pub(crate) async fn sweep(&self, table: &str, expired: impl Fn(i64) -> bool) -> Result<u32> {
        let index = self.index(table).await?;
        let gone: Vec<String> =
            index.into_iter().filter(|(_, n)| expired(*n)).map(|(id, _)| id).collect();
        for id in &gone {
            self.delete(table, id).await?;
        }
        self.index_remove(table, &gone).await?;
        Ok(u32::try_from(gone.len()).unwrap_or(u32::MAX))
    }
}

/// The id of an entry keyed by several parts: their JSON array, which no two different
/// lists of parts share.
pub(crate) fn id(parts: &[&str]) -> String {
    serde_json::to_string(parts).unwrap_or_default()
}

/// The id of an entry keyed by bytes: their hexadecimal form.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The bytes of a hexadecimal id.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Base64, for raw records inside JSON rows.
pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The bytes of a base64 field.
pub(crate) fn unb64(text: &str) -> Result<Vec<u8>> {
    B64.decode(text).map_err(decode_error)
}

/// The current Unix time in seconds.
pub(crate) fn now_secs() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
