//! Helpers shared by the integration tests.

use std::sync::{Arc, Mutex};

use botmesh_core::{BotBuilder, BotError, Event};
use botmesh_testing::TestProvider;

/// Records every event a bot emits.
#[derive(Clone, Default)]
pub(crate) struct Recorder(Arc<Mutex<Vec<Event>>>);

impl Recorder {
    pub(crate) fn attach(&self, builder: BotBuilder) -> BotBuilder {
        let log = Arc::clone(&self.0);
        builder.on(move |e| log.lock().unwrap().push(e.clone()))
    }

    pub(crate) fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn errors(&self) -> Vec<Arc<BotError>> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Error { error, .. } => Some(error),
                _ => None,
            })
            .collect()
    }
}

/// A builder on a fresh `TestProvider`, with a recorder attached.
pub(crate) fn builder() -> (BotBuilder, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let b = rec.attach(botmesh_core::Bot::builder().provider(provider.clone()));
    (b, provider, rec)
}

/// A custom store with only the required operations: checkpoints are written
/// unconditionally, and there are no task records, locks, leases or journal. It keeps its data
/// in a [`MemoryStore`].
///
/// [`MemoryStore`]: botmesh_core::MemoryStore
pub(crate) struct PlainStore {
    inner: botmesh_core::MemoryStore,
    shared: bool,
    /// How many times a checkpoint was read.
    checkpoint_reads: std::sync::atomic::AtomicUsize,
    /// How many times a chat record was written.
    chat_writes: std::sync::atomic::AtomicUsize,
}

impl PlainStore {
    /// Shared by replicas, as a custom store without compare-and-set might be.
    pub(crate) fn shared() -> Self {
        Self { shared: true, ..Self::local() }
    }

    /// One process's store.
    pub(crate) fn local() -> Self {
        Self {
            inner: botmesh_core::MemoryStore::new(),
            shared: false,
            checkpoint_reads: std::sync::atomic::AtomicUsize::new(0),
            chat_writes: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many times a chat record was written so far.
    pub(crate) fn chat_writes(&self) -> usize {
        self.chat_writes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many times a checkpoint was read so far.
    pub(crate) fn checkpoint_reads(&self) -> usize {
        self.checkpoint_reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[botmesh_core::traits::async_trait]
impl botmesh_core::traits::Store for PlainStore {
    fn shared(&self) -> bool {
        self.shared
    }

    async fn upsert_chat(
        &self,
        chat: &botmesh_core::traits::ChatRecord,
    ) -> botmesh_core::traits::Result<()> {
        self.chat_writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.upsert_chat(chat).await
    }

    async fn get_chat(
        &self,
        id: &botmesh_core::ChatId,
    ) -> botmesh_core::traits::Result<Option<botmesh_core::traits::ChatRecord>> {
        self.inner.get_chat(id).await
    }

    async fn get_user_data(&self, key: &str) -> botmesh_core::traits::Result<Option<String>> {
        self.inner.get_user_data(key).await
    }

    async fn set_user_data(&self, key: &str, data: &str) -> botmesh_core::traits::Result<()> {
        self.inner.set_user_data(key, data).await
    }

    async fn get_checkpoint(
        &self,
        key: &str,
    ) -> botmesh_core::traits::Result<Option<botmesh_core::traits::CheckpointRecord>> {
        self.checkpoint_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get_checkpoint(key).await
    }

    async fn set_checkpoint(
        &self,
        key: &str,
        write: &botmesh_core::traits::CheckpointWrite,
    ) -> botmesh_core::traits::Result<u64> {
        self.inner.set_checkpoint(key, write).await
    }

    async fn clear_checkpoint(&self, key: &str) -> botmesh_core::traits::Result<()> {
        self.inner.clear_checkpoint(key).await
    }
}
