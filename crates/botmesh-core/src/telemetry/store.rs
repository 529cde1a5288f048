//! The bot's store as the runtime uses it: every call timed into
//! [`STORE_CALLS`](super::STORE_CALLS) by operation and outcome, then passed on unchanged.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{CallTimings, STORE_CALLS};
use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatKey, ChatRecord, CheckpointRecord, CheckpointWrite, Error,
    FencedLock, InboxAppend, InboxRecord, JournalStore, LeaseGrant, LeaseStore, LockStore, Result,
    Store, TaskStore, async_trait,
};

/// The store operations, numbered as [`MeteredStore`] times them.
const OPS: [&str; 26] = [
    "upsert_chat",
    "get_chat",
    "get_user_data",
    "set_user_data",
    "get_checkpoint",
    "set_checkpoint",
    "clear_checkpoint",
    "set_checkpoint_if",
    "clear_checkpoint_if",
    "acquire_lock_fenced",
    "renew_lock",
    "release_lock",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "task_last",
    "task_claim",
    "inbox_append",
    "inbox_ack",
    "inbox_get",
    "inbox_pending",
    "inbox_pending_for",
    "inbox_claim",
    "outbox_mark",
    "outbox_marked",
    "inbox_ack_batch",
];

/// A store whose calls are timed.
///
/// It implements every capability trait, and its accessors return `Some(self)` only when the
/// inner store has the capability, so the runtime sees exactly what the inner store can do.
pub(crate) struct MeteredStore {
    inner: Arc<dyn Store>,
    timings: CallTimings,
}

impl MeteredStore {
    /// Wraps `inner`, taking the histograms from the recorder installed now.
    pub(crate) fn new(inner: Arc<dyn Store>) -> Self {
        Self { inner, timings: CallTimings::new(STORE_CALLS, &OPS) }
    }

    async fn timed<T>(&self, op: usize, call: impl Future<Output = Result<T>>) -> Result<T> {
        self.timings.time(op, call).await
    }
}

/// The inner store's capability for operation `op`. Only a caller that skipped the accessor
/// finds it missing, and gets what a store without it answers.
fn capability<'a, C: ?Sized>(found: Option<&'a C>, op: &'static str) -> Result<&'a C> {
    found.ok_or(Error::Unsupported { op })
}

#[async_trait]
impl Store for MeteredStore {
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
        self.timed(0, self.inner.upsert_chat(chat)).await
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        self.timed(1, self.inner.get_chat(id)).await
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        self.timed(2, self.inner.get_user_data(key)).await
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        self.timed(3, self.inner.set_user_data(key, data)).await
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        self.timed(4, self.inner.get_checkpoint(key)).await
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        self.timed(5, self.inner.set_checkpoint(key, write)).await
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        self.timed(6, self.inner.clear_checkpoint(key)).await
    }
}

#[async_trait]
impl CasStore for MeteredStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        self.timed(
            7,
            capability(self.inner.cas(), "set_checkpoint_if")?
                .set_checkpoint_if(key, write, expected),
        )
        .await
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        self.timed(
            8,
            capability(self.inner.cas(), "clear_checkpoint_if")?.clear_checkpoint_if(key, expected),
        )
        .await
    }
}

#[async_trait]
impl LockStore for MeteredStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        self.timed(
            9,
            capability(self.inner.locks(), "acquire_lock_fenced")?.acquire_lock_fenced(key, ttl),
        )
        .await
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        self.timed(10, capability(self.inner.locks(), "renew_lock")?.renew_lock(key, token, ttl))
            .await
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        self.timed(11, capability(self.inner.locks(), "release_lock")?.release_lock(key, token))
            .await
    }
}

#[async_trait]
impl LeaseStore for MeteredStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        self.timed(
            12,
            capability(self.inner.leases(), "acquire_lease")?.acquire_lease(name, holder, ttl),
        )
        .await
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.timed(
            13,
            capability(self.inner.leases(), "renew_lease")?.renew_lease(name, holder, ttl),
        )
        .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        self.timed(
            14,
            capability(self.inner.leases(), "release_lease")?.release_lease(name, holder),
        )
        .await
    }
}

#[async_trait]
impl TaskStore for MeteredStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        self.timed(15, capability(self.inner.tasks(), "task_last")?.task_last(id)).await
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        self.timed(16, capability(self.inner.tasks(), "task_claim")?.task_claim(id, occurrence))
            .await
    }
}

#[async_trait]
impl JournalStore for MeteredStore {
    fn place(&self) -> Option<&str> {
        self.inner.journal().and_then(JournalStore::place)
    }

    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        self.timed(
            17,
            capability(self.inner.journal(), "inbox_append")?.inbox_append(record, retain),
        )
        .await
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.timed(18, capability(self.inner.journal(), "inbox_ack")?.inbox_ack(id)).await
    }

    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        let journal = capability(self.inner.journal(), "inbox_ack_batch")?;
        self.timed(25, journal.inbox_ack_batch(ids)).await
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        self.timed(19, capability(self.inner.journal(), "inbox_get")?.inbox_get(id)).await
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        self.timed(20, capability(self.inner.journal(), "inbox_pending")?.inbox_pending(limit))
            .await
    }

    async fn inbox_pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>> {
        self.timed(
            21,
            capability(self.inner.journal(), "inbox_pending_for")?.inbox_pending_for(key, limit),
        )
        .await
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        self.timed(22, capability(self.inner.journal(), "inbox_claim")?.inbox_claim(id, from, to))
            .await
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        self.timed(23, capability(self.inner.journal(), "outbox_mark")?.outbox_mark(key, ttl)).await
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        self.timed(24, capability(self.inner.journal(), "outbox_marked")?.outbox_marked(key)).await
    }
}
