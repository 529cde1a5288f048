//! The backends every multi-replica scenario runs on: the in-memory hub under paused time,
//! and a private real Redis in real time.

use std::future::Future;
use std::sync::Arc;

use botmesh_core::MemoryStore;
use botmesh_core::traits::{Coordinator, Store};
use botmesh_redis_store::RedisStore;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, RedisServer};

use crate::replicas::LEASE;

/// Where the replicas of a scenario coordinate and keep their state.
pub(crate) trait Backend: Sync {
    fn store(&self) -> Arc<dyn Store>;
    fn coordinator(&self, id: &str) -> impl Future<Output = Arc<dyn Coordinator>> + Send;
}

pub(crate) struct Memory {
    hub: MemoryCoordinationHub,
    store: Arc<MemoryStore>,
}

impl Memory {
    pub(crate) fn new() -> Self {
        Self { hub: MemoryCoordinationHub::new(), store: Arc::new(MemoryStore::new()) }
    }
}

impl Backend for Memory {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    async fn coordinator(&self, id: &str) -> Arc<dyn Coordinator> {
        Arc::new(MemoryCoordinator::new(self.hub.clone(), id).with_lease(LEASE))
    }
}

pub(crate) struct Redis {
    /// Kept running while the backend lives.
    _server: RedisServer,
    store: Arc<RedisStore>,
}

impl Redis {
    pub(crate) async fn start() -> Self {
        let server = RedisServer::start().unwrap();
        let store = Arc::new(RedisStore::new(&server.url(), "replicas").await.unwrap());
        Self { _server: server, store }
    }
}

impl Backend for Redis {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Made by the store, as deployed: it writes the store's journal with its tickets and
    /// releases.
    async fn coordinator(&self, id: &str) -> Arc<dyn Coordinator> {
        Arc::new(self.store.coordinator(LEASE).with_replica_id(id))
    }
}

/// Each scenario, once on the hub and once on Redis.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(start_paused = true)]
            async fn on_the_memory_hub() {
                super::$name(&super::Memory::new()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_redis() {
                super::$name(&super::Redis::start().await).await;
            }
        }
    )*};
}
