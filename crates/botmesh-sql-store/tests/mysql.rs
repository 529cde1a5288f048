//! `MySqlStore` against the machine's real MariaDB, each test in a fresh database that is
//! dropped afterwards.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;

use botmesh_sql_store::{MySqlOptions, MySqlStore};
use botmesh_testing::{claimed_capabilities, racing_writers, store_conformance};
use botmesh_traits::{ErrorKind, Store};
use sqlx::Executor;

const SERVER: &str = "mysql://root@127.0.0.1:3306";

/// A database of its own for one test.
struct Fresh {
    admin: sqlx::MySqlPool,
    name: String,
}

impl Fresh {
    async fn new() -> Self {
        let admin = sqlx::MySqlPool::connect(&format!("{SERVER}/mysql")).await.unwrap();
        let name = format!("botmesh_{}", uuid::Uuid::new_v4().simple());
        admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await.unwrap();
        Self { admin, name }
    }

    fn url(&self) -> String {
        format!("{SERVER}/{}", self.name)
    }

    async fn drop_db(self) {
        self.admin
            .execute(sqlx::AssertSqlSafe(format!("DROP DATABASE {}", self.name)))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_passes_the_store_conformance_suite() {
    let db = Fresh::new().await;
    let store = MySqlStore::new(&db.url()).await.unwrap();
    assert_eq!(claimed_capabilities(&store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(Arc::new(store.clone())).await;
    store.pool().close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_on_two_pools_racing_one_revision_have_exactly_one_winner_each_round() {
    let db = Fresh::new().await;
    let pools: [Arc<dyn Store>; 2] = [
        Arc::new(MySqlStore::new(&db.url()).await.unwrap()),
        Arc::new(MySqlStore::new(&db.url()).await.unwrap()),
    ];
    racing_writers(&pools, "race", 8, 1000).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_apply_the_schema_once_and_a_newer_one_is_refused() {
    let db = Fresh::new().await;
    let url = db.url();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { MySqlStore::new(&url).await })
        })
        .collect();
    for s in starts {
        s.await.unwrap().unwrap().pool().close().await;
    }
    let store = MySqlStore::new(&url).await.unwrap();
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
    store.pool().execute("INSERT INTO botmesh_schema (version) VALUES (99)").await.unwrap();
    let err = MySqlStore::connect(MySqlOptions::new(&url)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    store.pool().close().await;
    db.drop_db().await;
}
