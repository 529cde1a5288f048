//! The store conformance suite against every store available here.

use std::sync::Arc;

use botmesh_core::MemoryStore;
use botmesh_testing::store_conformance;

#[tokio::test(start_paused = true)]
async fn memory_store_passes_the_store_conformance_suite() {
    store_conformance(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_conformance_suite_with_writers_on_several_threads() {
    store_conformance(Arc::new(MemoryStore::new())).await;
}
