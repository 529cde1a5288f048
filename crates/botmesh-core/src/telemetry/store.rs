//! The bot's store as the runtime uses it: every call timed into
//! [`STORE_CALLS`](super::STORE_CALLS) by operation and outcome, then passed on unchanged.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{CallTimings, STORE_CALLS};
use botmesh_traits::{
    CasOutcome, ChatId, ChatKey, ChatRecord, CheckpointRecord, CheckpointWrite, FencedLock,
    InboxAppend, InboxRecord, LeaseGrant, Result, Store, StoreCapabilities, async_trait,
};

/// The store operations, numbered as [`MeteredStore`] times them.
const OPS: [&str; 25] = [
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
    "outbox_claim",
    "outbox_release",
];

/// A store whose calls are timed.
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

#[async_trait]
impl Store for MeteredStore {
    fn capabilities(&self) -> StoreCapabilities {
        self.inner.capabilities()
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

    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        self.timed(7, self.inner.set_checkpoint_if(key, write, expected)).await
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        self.timed(8, self.inner.clear_checkpoint_if(key, expected)).await
    }

    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        self.timed(9, self.inner.acquire_lock_fenced(key, ttl)).await
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        self.timed(10, self.inner.renew_lock(key, token, ttl)).await
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        self.timed(11, self.inner.release_lock(key, token)).await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        self.timed(12, self.inner.acquire_lease(name, holder, ttl)).await
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.timed(13, self.inner.renew_lease(name, holder, ttl)).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        self.timed(14, self.inner.release_lease(name, holder)).await
    }

    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        self.timed(15, self.inner.task_last(id)).await
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        self.timed(16, self.inner.task_claim(id, occurrence)).await
    }

    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        self.timed(17, self.inner.inbox_append(record, retain)).await
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.timed(18, self.inner.inbox_ack(id)).await
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        self.timed(19, self.inner.inbox_get(id)).await
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        self.timed(20, self.inner.inbox_pending(limit)).await
    }

    async fn inbox_pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>> {
        self.timed(21, self.inner.inbox_pending_for(key, limit)).await
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        self.timed(22, self.inner.inbox_claim(id, from, to)).await
    }

    async fn outbox_claim(&self, key: &str, ttl: Duration) -> Result<bool> {
        self.timed(23, self.inner.outbox_claim(key, ttl)).await
    }

    async fn outbox_release(&self, key: &str) -> Result<()> {
        self.timed(24, self.inner.outbox_release(key)).await
    }
}
