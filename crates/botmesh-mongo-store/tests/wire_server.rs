//! `MongoStore` through the real `mongodb` driver against the wire-protocol test server
//! (`mockupdb` + `mongomock`, see `botmesh_testing::MongoServer`), each test in a fresh
//! database that is dropped afterwards.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;
use std::time::Duration;

use botmesh_mongo_store::{MongoOptions, MongoStore};
use botmesh_testing::{MongoServer, claimed_capabilities, racing_writers, store_conformance};
use botmesh_traits::{ErrorKind, InboxAppend, InboxRecord, JournalStore, Store};
use mongodb::bson::{Document, doc};

/// A database of its own for one test, on a server of its own.
struct Fresh {
    server: MongoServer,
    name: String,
}

impl Fresh {
    fn new() -> Self {
        let server = MongoServer::start().unwrap();
        Self { server, name: format!("botmesh_{}", uuid::Uuid::new_v4().simple()) }
    }

    fn options(&self) -> MongoOptions {
        MongoOptions::new(self.server.url()).database(&self.name)
    }

    async fn store(&self) -> MongoStore {
        MongoStore::connect(self.options()).await.unwrap()
    }

    async fn drop_db(self) {
        let client = mongodb::Client::with_uri_str(self.server.url()).await.unwrap();
        client.database(&self.name).drop().await.unwrap();
        let left = client.list_database_names().await.unwrap();
        assert!(!left.contains(&self.name), "the test database is dropped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongo_passes_the_store_conformance_suite() {
    let db = Fresh::new();
    let store = Arc::new(db.store().await);
    assert_eq!(claimed_capabilities(&*store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(store).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_on_two_clients_racing_one_revision_have_exactly_one_winner_each_round() {
    let db = Fresh::new();
    let clients: [Arc<dyn Store>; 2] = [Arc::new(db.store().await), Arc::new(db.store().await)];
    racing_writers(&clients, "race", 8, 1000).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_one_inbox_id_journal_it_once() {
    let db = Fresh::new();
    let clients = [db.store().await, db.store().await];
    for round in 0..50 {
        let mut tasks = Vec::new();
        for w in 0..4 {
            let store = clients[w % 2].clone();
            tasks.push(tokio::spawn(async move {
                let record = InboxRecord::pending(
                    format!("msg-{round}"),
                    "chat",
                    "{}",
                    format!("replica-{w}"),
                );
                store.inbox_append(&record, Duration::from_secs(60)).await.unwrap()
            }));
        }
        let mut appended = 0;
        for t in tasks {
            if t.await.unwrap() == InboxAppend::Appended {
                appended += 1;
            }
        }
        assert_eq!(appended, 1, "round {round}: one replica journals the message");
    }
    assert_eq!(clients[0].inbox_pending(1000).await.unwrap().len(), 50);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_create_the_schema_once() {
    let db = Fresh::new();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let options = db.options();
            tokio::spawn(async move { MongoStore::connect(options).await })
        })
        .collect();
    for s in starts {
        s.await.unwrap().unwrap();
    }
    let store = db.store().await;
    let meta = store.database().collection::<Document>("botmesh_meta");
    let schema = meta.find_one(doc! { "_id": "schema" }).await.unwrap().unwrap();
    assert_eq!(
        schema.get_i64("version").ok().or(schema.get_i32("version").ok().map(i64::from)),
        Some(1)
    );
    let names =
        store.database().collection::<Document>("botmesh_inbox").list_index_names().await.unwrap();
    assert!(names.contains(&"pending_by_seq".to_owned()), "{names:?}");
    assert!(names.contains(&"forget_at_ttl".to_owned()), "{names:?}");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_prefix_keeps_two_bots_apart() {
    let db = Fresh::new();
    let a = MongoStore::connect(db.options().collection_prefix("a_")).await.unwrap();
    let b = MongoStore::connect(db.options().collection_prefix("b_")).await.unwrap();
    a.set_user_data("u", "{}").await.unwrap();
    assert_eq!(b.get_user_data("u").await.unwrap(), None);
    assert_eq!(a.collection_prefix(), "a_");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_a_newer_version_is_refused() {
    let db = Fresh::new();
    let store = db.store().await;
    store
        .database()
        .collection::<Document>("botmesh_meta")
        .update_one(doc! { "_id": "schema" }, doc! { "$set": { "version": 99_i64 } })
        .await
        .unwrap();
    for options in [db.options(), db.options().migrate(false)] {
        let err = MongoStore::connect(options).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(format!("{err:?}").contains("newer"), "{err:?}");
    }
    db.drop_db().await;
}

#[tokio::test]
async fn a_bad_url_is_a_configuration_error() {
    for url in ["not a url", "postgres://127.0.0.1/db", "mongodb://"] {
        let err = MongoStore::new(url).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Configuration, "{url}: {err:?}");
        assert!(format!("{err:?}").contains("invalid MongoDB URL"), "{err:?}");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_store_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let options = MongoOptions::new(format!("mongodb://127.0.0.1:{port}/?directConnection=true"))
        .server_selection_timeout(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let err = MongoStore::connect(options).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "the selection timeout bounds the wait");
    assert_eq!(err.kind(), ErrorKind::Store);
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        source.contains(&format!("no MongoDB server answered at 127.0.0.1:{port}")),
        "{source}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_operations_with_retryable_store_errors() {
    let mut db = Fresh::new();
    let store =
        MongoStore::connect(db.options().server_selection_timeout(Duration::from_millis(500)))
            .await
            .unwrap();
    store.set_user_data("u", "{}").await.unwrap();
    db.server.kill();
    let err = store.get_user_data("u").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert!(err.is_retryable());
}
