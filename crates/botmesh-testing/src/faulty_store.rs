//! A store wrapper whose checkpoint writes can be slowed down, hung or failed, and whose journal
//! acknowledgements can fail, for fault tests on any backend.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatKey, ChatRecord, CheckpointRecord, CheckpointWrite, Error,
    FencedLock, InboxAppend, InboxRecord, JournalStore, LeaseGrant, LeaseStore, LockStore, Result,
    Store, TaskStore, async_trait,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The wrapped store's capability for operation `op`. Only a caller that skipped the accessor
/// finds it missing, and gets what a store without it answers.
fn capability<'a, C: ?Sized>(found: Option<&'a C>, op: &'static str) -> Result<&'a C> {
    found.ok_or(Error::Unsupported { op })
}

/// Wraps any [`Store`] so a test can disturb its checkpoint writes the way a network does.
///
/// - [`delay_checkpoint_writes`](Self::delay_checkpoint_writes): each write lands `delay`
///   after it was sent, whether or not the caller still waits for the reply, as a command
///   already on the wire does.
/// - [`hang_checkpoint_writes`](Self::hang_checkpoint_writes): the next writes never land and
///   never answer, as on a connection that went silent.
/// - [`fail_checkpoint_writes`](Self::fail_checkpoint_writes): the next writes fail with a
///   store error without landing.
/// - [`fail_checkpoint_reads`](Self::fail_checkpoint_reads): the next checkpoint reads fail
///   with a store error.
/// - [`fail_acknowledgements`](Self::fail_acknowledgements): the next journal
///   acknowledgements fail the same way.
/// - [`refuse_lock_renewals`](Self::refuse_lock_renewals): the next fenced lock renewals
///   answer that the lock is no longer held, as when it ran out under a stalled holder.
/// - [`fail_journal_appends`](Self::fail_journal_appends): the next journal appends (a
///   message arriving) fail the same way.
/// - [`lose_outbox_replies`](Self::lose_outbox_replies): the next outbox calls reach the
///   wrapped store, then fail as if their reply was lost.
///
/// Every other method goes straight to the wrapped store. [`landed`](Self::landed) lists when
/// each checkpoint write (and clear) reached the wrapped store. It has exactly the wrapped
/// store's capabilities: an accessor such as [`Store::journal`] answers `Some` only when the
/// wrapped store's does.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    delay: Mutex<Option<Duration>>,
    hang: AtomicU32,
    fail: AtomicU32,
    fail_reads: AtomicU32,
    fail_acks: AtomicU32,
    fail_appends: AtomicU32,
    lose_outbox: AtomicU32,
    refuse_renewals: AtomicU32,
    acks: AtomicU32,
    ack_calls: AtomicU32,
    ack_delay: Mutex<Option<Duration>>,
    ack_panics: AtomicU32,
    outbox: Mutex<Vec<&'static str>>,
    landed: Arc<Mutex<Vec<Instant>>>,
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore")
            .field("delay", &*lock(&self.delay))
            .field("hang", &self.hang)
            .field("fail", &self.fail)
            .finish_non_exhaustive()
    }
}

impl FaultyStore {
    /// Wraps `inner`, healthy.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            delay: Mutex::new(None),
            hang: AtomicU32::new(0),
            fail: AtomicU32::new(0),
            fail_reads: AtomicU32::new(0),
            fail_acks: AtomicU32::new(0),
            fail_appends: AtomicU32::new(0),
            lose_outbox: AtomicU32::new(0),
            refuse_renewals: AtomicU32::new(0),
            acks: AtomicU32::new(0),
            ack_calls: AtomicU32::new(0),
            ack_delay: Mutex::new(None),
            ack_panics: AtomicU32::new(0),
            outbox: Mutex::default(),
            landed: Arc::default(),
        }
    }

    /// Makes every later checkpoint write land `delay` after it is sent (`None`: at once).
    pub fn delay_checkpoint_writes(&self, delay: impl Into<Option<Duration>>) {
        *lock(&self.delay) = delay.into();
    }

    /// Makes the next `count` checkpoint writes hang: they never land and never answer.
    pub fn hang_checkpoint_writes(&self, count: u32) {
        self.hang.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` checkpoint writes fail without landing.
    pub fn fail_checkpoint_writes(&self, count: u32) {
        self.fail.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` checkpoint reads (`get_checkpoint`) fail, as on a connection
    /// that dropped or timed out.
    pub fn fail_checkpoint_reads(&self, count: u32) {
        self.fail_reads.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` journal acknowledgements (`inbox_ack`) fail without landing.
    pub fn fail_acknowledgements(&self, count: u32) {
        self.fail_acks.store(count, Ordering::SeqCst);
    }

    /// Makes every later call acknowledging journaled messages (`inbox_ack_batch`) wait
    /// `delay` before its acknowledgements are tried (`None`: at once).
    pub fn delay_acknowledgements(&self, delay: impl Into<Option<Duration>>) {
        *lock(&self.ack_delay) = delay.into();
    }

    /// Makes the next `count` calls acknowledging journaled messages (`inbox_ack_batch`)
    /// panic, as a store with a bug would, before any acknowledgement is tried.
    pub fn panic_on_acknowledgements(&self, count: u32) {
        self.ack_panics.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` journal appends (`inbox_append`) fail without landing.
    pub fn fail_journal_appends(&self, count: u32) {
        self.fail_appends.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` outbox calls (`outbox_mark`, `outbox_marked`) land on the
    /// wrapped store and then fail, as on a connection that dropped before the reply came.
    pub fn lose_outbox_replies(&self, count: u32) {
        self.lose_outbox.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` fenced lock renewals (`renew_lock`) answer `false`: the lock is
    /// no longer the caller's. The lock itself is left as it is.
    pub fn refuse_lock_renewals(&self, count: u32) {
        self.refuse_renewals.store(count, Ordering::SeqCst);
    }

    /// How many journal acknowledgements were tried, failed ones included.
    pub fn acknowledgements_tried(&self) -> u32 {
        self.acks.load(Ordering::SeqCst)
    }

    /// How many calls acknowledging several journaled messages at once (`inbox_ack_batch`)
    /// were made; each acknowledgement in them counts in
    /// [`acknowledgements_tried`](Self::acknowledgements_tried) too.
    pub fn acknowledgement_calls(&self) -> u32 {
        self.ack_calls.load(Ordering::SeqCst)
    }

    /// The outbox calls made so far, in order: `"mark"` (`outbox_mark`) or `"marked"`
    /// (`outbox_marked`).
    pub fn outbox_calls(&self) -> Vec<&'static str> {
        lock(&self.outbox).clone()
    }

    /// When each checkpoint write or clear reached the wrapped store, in order.
    pub fn landed(&self) -> Vec<Instant> {
        lock(&self.landed).clone()
    }

    /// `reply`, or the error of a reply lost on the way back when `lose_outbox_replies` asks.
    fn lose_reply<T>(&self, op: &'static str, reply: Result<T>) -> Result<T> {
        match Self::take(&self.lose_outbox) {
            true => Err(Error::store(op, "the test lost this reply")),
            false => reply,
        }
    }

    fn take(counter: &AtomicU32) -> bool {
        counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// Sends a checkpoint write through the configured fault.
    async fn write<T, F>(&self, op: &'static str, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        if Self::take(&self.fail) {
            return Err(Error::store(op, "the test failed this write"));
        }
        if Self::take(&self.hang) {
            return std::future::pending().await;
        }
        let delay = *lock(&self.delay);
        let landed = Arc::clone(&self.landed);
        let (tx, rx) = oneshot::channel();
        // On the wire: it lands even if the caller stops waiting for the reply.
        tokio::spawn(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let result = write.await;
            lock(&landed).push(Instant::now());
            let _ = tx.send(result);
        });
        rx.await.unwrap_or_else(|_| Err(Error::store(op, "the write task ended")))
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn cas(&self) -> Option<&dyn CasStore> {
        self.inner.cas().map(|_| self as &dyn CasStore)
    }

    fn locks(&self) -> Option<&dyn LockStore> {
        self.inner.locks().map(|_| self as &dyn LockStore)
    }

    fn leases(&self) -> Option<&dyn LeaseStore> {
        self.inner.leases().map(|_| self as &dyn LeaseStore)
    }

    fn tasks(&self) -> Option<&dyn TaskStore> {
        self.inner.tasks().map(|_| self as &dyn TaskStore)
    }

    fn journal(&self) -> Option<&dyn JournalStore> {
        self.inner.journal().map(|_| self as &dyn JournalStore)
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
        self.inner.upsert_chat(chat).await
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        self.inner.get_chat(id).await
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        self.inner.get_user_data(key).await
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        self.inner.set_user_data(key, data).await
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        if Self::take(&self.fail_reads) {
            return Err(Error::store("get_checkpoint", "the test failed this read"));
        }
        self.inner.get_checkpoint(key).await
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        let (inner, key, write) = (Arc::clone(&self.inner), key.to_owned(), write.clone());
        self.write("set_checkpoint", async move { inner.set_checkpoint(&key, &write).await }).await
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        let (inner, key) = (Arc::clone(&self.inner), key.to_owned());
        self.write("clear_checkpoint", async move { inner.clear_checkpoint(&key).await }).await
    }
}

#[async_trait]
impl CasStore for FaultyStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let (inner, key, write) = (Arc::clone(&self.inner), key.to_owned(), write.clone());
        self.write("set_checkpoint_if", async move {
            capability(inner.cas(), "set_checkpoint_if")?
                .set_checkpoint_if(&key, &write, expected)
                .await
        })
        .await
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let (inner, key) = (Arc::clone(&self.inner), key.to_owned());
        self.write("clear_checkpoint_if", async move {
            capability(inner.cas(), "clear_checkpoint_if")?
                .clear_checkpoint_if(&key, expected)
                .await
        })
        .await
    }
}

#[async_trait]
impl LockStore for FaultyStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        capability(self.inner.locks(), "acquire_lock_fenced")?.acquire_lock_fenced(key, ttl).await
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        if Self::take(&self.refuse_renewals) {
            return Ok(false);
        }
        capability(self.inner.locks(), "renew_lock")?.renew_lock(key, token, ttl).await
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        capability(self.inner.locks(), "release_lock")?.release_lock(key, token).await
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        capability(self.inner.leases(), "acquire_lease")?.acquire_lease(name, holder, ttl).await
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        capability(self.inner.leases(), "renew_lease")?.renew_lease(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        capability(self.inner.leases(), "release_lease")?.release_lease(name, holder).await
    }
}

#[async_trait]
impl TaskStore for FaultyStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        capability(self.inner.tasks(), "task_last")?.task_last(id).await
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        capability(self.inner.tasks(), "task_claim")?.task_claim(id, occurrence).await
    }
}

#[async_trait]
impl JournalStore for FaultyStore {
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        if Self::take(&self.fail_appends) {
            return Err(Error::store("inbox_append", "the test failed this journal append"));
        }
        capability(self.inner.journal(), "inbox_append")?.inbox_append(record, retain).await
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.acks.fetch_add(1, Ordering::SeqCst);
        if Self::take(&self.fail_acks) {
            return Err(Error::store("inbox_ack", "the test failed this acknowledgement"));
        }
        capability(self.inner.journal(), "inbox_ack")?.inbox_ack(id).await
    }

    /// Each acknowledgement as [`inbox_ack`](JournalStore::inbox_ack) here, so that the
    /// failures set up apply to them one by one.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        self.ack_calls.fetch_add(1, Ordering::SeqCst);
        if Self::take(&self.ack_panics) {
            panic!("the test made this acknowledgement call panic");
        }
        let delay = *lock(&self.ack_delay);
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        for id in ids {
            self.inbox_ack(id).await?;
        }
        Ok(())
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        capability(self.inner.journal(), "inbox_get")?.inbox_get(id).await
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        capability(self.inner.journal(), "inbox_pending")?.inbox_pending(limit).await
    }

    async fn inbox_pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>> {
        capability(self.inner.journal(), "inbox_pending_for")?.inbox_pending_for(key, limit).await
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        capability(self.inner.journal(), "inbox_claim")?.inbox_claim(id, from, to).await
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        lock(&self.outbox).push("mark");
        let marked = capability(self.inner.journal(), "outbox_mark")?.outbox_mark(key, ttl);
        self.lose_reply("outbox_mark", marked.await)
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        lock(&self.outbox).push("marked");
        let marked = capability(self.inner.journal(), "outbox_marked")?.outbox_marked(key);
        self.lose_reply("outbox_marked", marked.await)
    }
}
