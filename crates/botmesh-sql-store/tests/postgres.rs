//! `PostgresStore` against the machine's real PostgreSQL, each test in a fresh database that is
//! dropped afterwards.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;

use botmesh_sql_store::{PostgresOptions, PostgresStore};
use botmesh_testing::{claimed_capabilities, racing_writers, store_conformance};
use botmesh_traits::{ErrorKind, Store};
use sqlx::Executor;

const SERVER: &str = "postgres://postgres@127.0.0.1:5432";

/// A database of its own for one test.
struct Fresh {
    admin: sqlx::PgPool,
    name: String,
}

impl Fresh {
    async fn new() -> Self {
        let admin = sqlx::PgPool::connect(&format!("{SERVER}/postgres")).await.unwrap();
        let name = format!("botmesh_{}", uuid::Uuid::new_v4().simple());
        admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await.unwrap();
        Self { admin, name }
    }

    fn url(&self) -> String {
        format!("{SERVER}/{}", self.name)
    }

    async fn drop_db(self) {
        self.admin
            .execute(sqlx::AssertSqlSafe(format!("DROP DATABASE {} WITH (FORCE)", self.name)))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_store_conformance_suite() {
    let db = Fresh::new().await;
    let store = Arc::new(PostgresStore::new(&db.url()).await.unwrap());
    assert_eq!(claimed_capabilities(&*store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(store).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_on_two_pools_racing_one_revision_have_exactly_one_winner_each_round() {
    let db = Fresh::new().await;
    let pools: [Arc<dyn Store>; 2] = [
        Arc::new(PostgresStore::new(&db.url()).await.unwrap()),
        Arc::new(PostgresStore::new(&db.url()).await.unwrap()),
    ];
    racing_writers(&pools, "race", 8, 1000).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_apply_the_schema_once() {
    let db = Fresh::new().await;
    let url = db.url();
    let starts: Vec<_> = (0..4).map(|_| tokio::spawn(PostgresStore::new(url.clone()))).collect();
    for s in starts {
        s.await.unwrap().unwrap();
    }
    let store = PostgresStore::new(&url).await.unwrap();
    // One row per version, each applied once, from the first to the newest.
    let (rows, distinct, newest): (i64, i64, Option<i32>) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT version), max(version) FROM botmesh_schema",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(rows, distinct, "a version was applied twice");
    assert_eq!(Some(rows), newest.map(i64::from), "versions are applied in order, none skipped");
    assert!(rows >= 2, "the schema has its versions");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_a_newer_version_is_refused() {
    let db = Fresh::new().await;
    let store = PostgresStore::new(&db.url()).await.unwrap();
    store.pool().execute("INSERT INTO botmesh_schema (version) VALUES (99)").await.unwrap();
    let err = PostgresStore::new(&db.url()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(format!("{err:?}").contains("newer"), "{err:?}");
    store.pool().close().await;
    db.drop_db().await;
}

#[tokio::test]
async fn a_wrong_url_and_a_missing_database_are_clear_errors() {
    let err = PostgresStore::new("not a url").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    let options = PostgresOptions::new(format!("{SERVER}/botmesh_does_not_exist"))
        .acquire_timeout(std::time::Duration::from_secs(2));
    let err = PostgresStore::connect(options).await.unwrap_err();
    let text = format!("{err} {:?}", std::error::Error::source(&err));
    assert!(text.contains("does not exist"), "{text}");
}
