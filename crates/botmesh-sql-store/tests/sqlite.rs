//! `SqliteStore` in a temporary file and in memory.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;

use botmesh_sql_store::SqliteStore;
use botmesh_testing::{claimed_capabilities, racing_writers, store_conformance};
use botmesh_traits::{CheckpointWrite, Store};

fn temp_file() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("botmesh-{}.db", uuid::Uuid::new_v4().simple()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_a_file_passes_the_store_conformance_suite() {
    let path = temp_file();
    store_conformance(Arc::new(SqliteStore::open(&path).await.unwrap())).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_passes_the_store_conformance_suite() {
    let store = Arc::new(SqliteStore::in_memory().await.unwrap());
    assert_eq!(claimed_capabilities(&*store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_survives_reopening_the_file() {
    let path = temp_file();
    let store = SqliteStore::open(&path).await.unwrap();
    let rev = store.set_checkpoint("c", &CheckpointWrite::new(r#"{"step":1}"#)).await.unwrap();
    store.pool().close().await;
    drop(store);
    let reopened = SqliteStore::open(&path).await.unwrap();
    let got = reopened.get_checkpoint("c").await.unwrap().unwrap();
    assert_eq!((got.data.as_str(), got.revision), (r#"{"step":1}"#, rev));
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_racing_one_revision_have_exactly_one_winner() {
    let path = temp_file();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    racing_writers(&[store], "race", 4, 200).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_the_application_s_own_pool_passes_the_conformance_suite_once_migrated() {
    let path = temp_file();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let store = SqliteStore::from_pool(pool.clone());
    store.migrate().await.unwrap();
    store_conformance(Arc::new(store)).await;
    // The application's pool is the store's: the store's tables are there through it.
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE name = 'botmesh_schema'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(tables, 1);
    let _ = std::fs::remove_file(&path);
}
