//! `stores`: the latency of a checkpoint compare-and-set and of an inbox insert on every store
//! backend that runs here: `BACKEND_cas_p50_us`, `BACKEND_cas_p99_us`, `BACKEND_inbox_p50_us`.
//!
//! PostgreSQL and MariaDB are the machine's own servers, each in a fresh database dropped
//! afterwards; Redis is a private server; SQLite is a temporary file. MongoDB is the
//! wire-protocol test server (`mockupdb` + `mongomock` in Python, see
//! `botmesh_testing::MongoServer`), since no real `mongod` runs here: its figures measure the
//! driver and the store's round trips against that server, not MongoDB's own speed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_core::MemoryStore;
use botmesh_core::traits::{CasOutcome, CheckpointWrite, InboxRecord, Store};
use botmesh_mongo_store::{MongoOptions, MongoStore};
use botmesh_redis_store::RedisStore;
use botmesh_sql_store::{MySqlStore, PostgresStore, SqliteStore};
use botmesh_testing::{MongoServer, RedisServer};
use sqlx::Executor;

use crate::Figures;
use crate::common::{Res, percentile};

const ROUNDS: usize = 2_000;

/// Microseconds per operation, sorted: chained compare-and-sets on one key, and inserts of new
/// inbox ids.
async fn measure(store: &dyn Store) -> Res<(Vec<f64>, Vec<f64>)> {
    let (Some(cas_store), Some(journal)) = (store.cas(), store.journal()) else {
        return Err("the store has no compare-and-set or no journal".into());
    };
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let mut revision = store.set_checkpoint(&key, &CheckpointWrite::new("{}")).await?;
    let mut cas = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let started = Instant::now();
        let outcome = cas_store
            .set_checkpoint_if(
                &key,
                &CheckpointWrite::new(format!("{{\"i\":{i}}}")),
                Some(revision),
            )
            .await?;
        cas.push(started.elapsed().as_secs_f64() * 1e6);
        match outcome {
            CasOutcome::Written { revision: r } => revision = r,
            other => {
                return Err(format!("an uncontended compare-and-set was refused: {other:?}").into());
            }
        }
    }
    let mut inbox = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let record = InboxRecord::pending(format!("{key}:{i}"), key.as_str(), "{}", "bench");
        let started = Instant::now();
        journal.inbox_append(&record, Duration::from_secs(60)).await?;
        inbox.push(started.elapsed().as_secs_f64() * 1e6);
    }
    cas.sort_by(f64::total_cmp);
    inbox.sort_by(f64::total_cmp);
    Ok((cas, inbox))
}

fn figures(out: &mut Figures, backend: &'static str, (cas, inbox): (Vec<f64>, Vec<f64>)) {
    let name =
        |what: &str| -> &'static str { Box::leak(format!("{backend}_{what}").into_boxed_str()) };
    out.push((name("cas_p50_us"), percentile(&cas, 0.50), "us"));
    out.push((name("cas_p99_us"), percentile(&cas, 0.99), "us"));
    out.push((name("inbox_p50_us"), percentile(&inbox, 0.50), "us"));
}

pub(crate) async fn run() -> Res<Figures> {
    let mut out = Figures::new();

    figures(&mut out, "memory", measure(&MemoryStore::new()).await?);

    let file =
        std::env::temp_dir().join(format!("botmesh-bench-{}.db", uuid::Uuid::new_v4().simple()));
    let sqlite = SqliteStore::open(&file).await?;
    figures(&mut out, "sqlite", measure(&sqlite).await?);
    sqlite.pool().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }

    let name = format!("botmesh_bench_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await?;
    let postgres =
        PostgresStore::new(&format!("postgres://postgres@127.0.0.1:5432/{name}")).await?;
    let measured = measure(&postgres).await;
    postgres.pool().close().await;
    admin.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)"))).await?;
    figures(&mut out, "postgres", measured?);

    let admin = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/mysql").await?;
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await?;
    let mysql = MySqlStore::new(&format!("mysql://root@127.0.0.1:3306/{name}")).await?;
    let measured = measure(&mysql).await;
    mysql.pool().close().await;
    admin.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}"))).await?;
    figures(&mut out, "mysql", measured?);

    let server = RedisServer::start()?;
    let redis: Arc<dyn Store> = Arc::new(RedisStore::new(&server.url(), "bench").await?);
    figures(&mut out, "redis", measure(&*redis).await?);

    let server = MongoServer::start()?;
    let mongo = MongoStore::connect(MongoOptions::new(server.url()).database(&name)).await?;
    let measured = measure(&mongo).await;
    mongo.database().drop().await?;
    figures(&mut out, "mongo", measured?);

    Ok(out)
}
