//! [`MySqlStore`], for MySQL and MariaDB.
//!
//! MySQL has no `RETURNING` on updates, so each compare-and-set is a conditional `UPDATE`
//! (decided atomically by the row lock) followed, when no row matched, by an
//! `INSERT IGNORE` (decided atomically by the primary key); new counters come back through
//! `LAST_INSERT_ID(expr)` on the same connection.
//!
//! Kept whole: `impl Store for MySqlStore` and its capability traits, every method of the
//! contract in the contract's order, each with the two statements MySQL needs where the others
//! need one.

use std::str::FromStr;
use std::time::Duration;

use botmesh_traits::{
    BoxError, CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error,
    FencedLock, InboxAppend, InboxRecord, InboxState, JournalStore, LeaseGrant, LeaseStore,
    LockStore, Result, Store, TaskStore, async_trait,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::{Executor, Row};

/// The schema, one entry per version and one statement per entry (MySQL runs DDL statement
/// by statement). Never edit a released entry.
const MIGRATIONS: &[&[&str]] = &[&[
    "CREATE TABLE botmesh_chats (id VARCHAR(512) PRIMARY KEY, provider TEXT NOT NULL, lang TEXT,
       first_seen_ms BIGINT NOT NULL, last_seen_ms BIGINT NOT NULL)",
    "CREATE TABLE botmesh_users (`key` VARCHAR(512) PRIMARY KEY, data LONGTEXT NOT NULL)",
    "CREATE TABLE botmesh_checkpoints (`key` VARCHAR(512) PRIMARY KEY, data LONGTEXT,
       revision BIGINT NOT NULL, expires_at BIGINT)",
    "CREATE TABLE botmesh_locks (`key` VARCHAR(512) PRIMARY KEY, token VARCHAR(64),
       fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)",
    "CREATE TABLE botmesh_leases (name VARCHAR(512) PRIMARY KEY, holder VARCHAR(512),
       fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)",
    "CREATE TABLE botmesh_inbox (id VARCHAR(512) PRIMARY KEY, `key` VARCHAR(512) NOT NULL,
       payload LONGTEXT NOT NULL, owner VARCHAR(512) NOT NULL, state VARCHAR(16) NOT NULL,
       seq BIGINT NOT NULL AUTO_INCREMENT UNIQUE, retain_ms BIGINT NOT NULL, forget_at BIGINT)",
    "CREATE TABLE botmesh_outbox (`key` VARCHAR(512) PRIMARY KEY, expires_at BIGINT NOT NULL)",
], &[
    "CREATE TABLE botmesh_tasks (id VARCHAR(512) PRIMARY KEY, last BIGINT NOT NULL)",
]];

/// Now, in milliseconds since the Unix epoch, on the database's clock.
const NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2).max(1)
}

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |e| Error::store(op, e)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A statement built from the constants of this module only: safe to run.
fn sql(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

/// How to reach MySQL or MariaDB.
///
/// Defaults: a pool of up to 10 connections, 5 s to get one, and the schema applied on connect.
/// `Debug` output shows the URL without its password.
///
/// With the `serde` feature they read from a configuration file: `url`, and optionally
/// `max_connections`, `acquire_timeout` (a duration in text, `"5s"`) and `migrate`; unknown
/// keys are refused.
#[derive(Clone)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(from = "crate::config::ServerOptionsText")
)]
#[non_exhaustive]
#[must_use = "options do nothing until the store connects with them"]
pub struct MySqlOptions {
    url: String,
    max_connections: u32,
    acquire_timeout: Duration,
    migrate: bool,
}

impl std::fmt::Debug for MySqlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("MySqlOptions")
            .field("url", &botmesh_traits::redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl MySqlOptions {
    /// A database at `url` (`mysql://user:pass@host:3306/db`).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            migrate: true,
        }
    }

    /// The largest number of pooled connections.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// How long to wait for a pooled connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Whether to apply the embedded schema on connect (the default).
    pub fn migrate(mut self, yes: bool) -> Self {
        self.migrate = yes;
        self
    }
}

/// A [`Store`] on MySQL or MariaDB.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
}

/// The counter a `LAST_INSERT_ID(expr)` in the previous statement set, on this connection.
async fn last_id(conn: &mut MySqlConnection) -> std::result::Result<i64, sqlx::Error> {
    let id: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()").fetch_one(conn).await?;
    Ok(i64::try_from(id).unwrap_or(i64::MAX))
}

impl MySqlStore {
    /// Acknowledges journaled messages `ids`, one statement per [`ACK_CHUNK`](crate::ACK_CHUNK)
    /// of them; `op` names the call in errors.
    async fn acknowledge(&self, ids: &[&str], op: &'static str) -> Result<()> {
        for chunk in ids.chunks(crate::ACK_CHUNK) {
            let sql = sql(format!(
                "UPDATE botmesh_inbox SET state = 'acked', forget_at = {NOW} + retain_ms WHERE id IN ({})",
                crate::placeholders(chunk.len())
            ));
            let query = chunk.iter().fold(sqlx::query(sql), |q, id| q.bind(id));
            query.execute(&self.pool).await.map_err(db(op))?;
        }
        Ok(())
    }

    /// Connects to `url` with the default options.
    pub async fn new(url: impl Into<String>) -> Result<Self> {
        Self::connect(MySqlOptions::new(url)).await
    }

    /// A store on a pool the application already has. The schema is not applied: call
    /// [`migrate`](Self::migrate) once (it is idempotent, and safe from replicas starting
    /// together) unless your deployment applies it.
    pub fn from_pool(pool: MySqlPool) -> Self {
        Self { pool }
    }

    /// Connects, and applies the schema unless told not to.
    pub async fn connect(options: MySqlOptions) -> Result<Self> {
        let connect = MySqlConnectOptions::from_str(&options.url)
            .map_err(|e| Error::Configuration(BoxError::from(format!("invalid MySQL URL: {e}"))))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| Error::store("connect", e))?;
        let store = Self { pool };
        if options.migrate {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// The pool, for code that shares it.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Applies the embedded schema versions not applied yet, under a named lock so that
    /// replicas starting together apply each once.
    pub async fn migrate(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(db("migrate"))?;
        let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('botmesh_schema', 60)")
            .fetch_one(&mut *conn)
            .await
            .map_err(db("migrate"))?;
        if locked != Some(1) {
            return Err(Error::store("migrate", "timed out waiting for the schema lock"));
        }
        let applied = async {
            conn.execute("CREATE TABLE IF NOT EXISTS botmesh_schema (version INT NOT NULL)")
                .await
                .map_err(db("migrate"))?;
            let version: Option<i32> = sqlx::query_scalar("SELECT max(version) FROM botmesh_schema")
                .fetch_one(&mut *conn)
                .await
                .map_err(db("migrate"))?;
            let version = usize::try_from(version.unwrap_or(0)).unwrap_or(0);
            if version > MIGRATIONS.len() {
                return Err(Error::Configuration(BoxError::from(format!(
                    "the database schema is at version {version}, newer than this botmesh-sql-store knows ({})",
                    MIGRATIONS.len()
                ))));
            }
            for (i, statements) in MIGRATIONS.iter().enumerate().skip(version) {
                for statement in *statements {
                    conn.execute(*statement).await.map_err(db("migrate"))?;
                }
                sqlx::query("INSERT INTO botmesh_schema (version) VALUES (?)")
                    .bind(i32::try_from(i + 1).unwrap_or(i32::MAX))
                    .execute(&mut *conn)
                    .await
                    .map_err(db("migrate"))?;
            }
            Ok(())
        }
        .await;
        conn.execute("SELECT RELEASE_LOCK('botmesh_schema')").await.map_err(db("migrate"))?;
        applied
    }

    async fn conn(&self, op: &'static str) -> Result<sqlx::pool::PoolConnection<sqlx::MySql>> {
        self.pool.acquire().await.map_err(db(op))
    }
}

#[async_trait]
impl Store for MySqlStore {
    fn shared(&self) -> bool {
        true
    }

    fn cas(&self) -> Option<&dyn CasStore> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn LockStore> {
        Some(self)
    }

    fn leases(&self) -> Option<&dyn LeaseStore> {
        Some(self)
    }

    fn tasks(&self) -> Option<&dyn TaskStore> {
        Some(self)
    }

    fn journal(&self) -> Option<&dyn JournalStore> {
        Some(self)
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO botmesh_chats (id, provider, lang, first_seen_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE provider = VALUES(provider), lang = COALESCE(VALUES(lang), lang),
               last_seen_ms = GREATEST(last_seen_ms, VALUES(last_seen_ms))",
        )
        .bind(chat.id.as_str())
        .bind(&chat.provider)
        .bind(chat.lang.as_deref())
        .bind(to_i64(chat.first_seen_ms))
        .bind(to_i64(chat.last_seen_ms))
        .execute(&self.pool)
        .await
        .map_err(db("upsert_chat"))?;
        Ok(())
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        let row = sqlx::query(
            "SELECT provider, lang, first_seen_ms, last_seen_ms FROM botmesh_chats WHERE id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db("get_chat"))?;
        Ok(row.map(|r| {
            let mut c = ChatRecord::new(id.clone(), r.get::<String, _>(0), to_u64(r.get(2)));
            c.lang = r.get(1);
            c.last_seen_ms = to_u64(r.get(3));
            c
        }))
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT data FROM botmesh_users WHERE `key` = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("get_user_data"))
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        sqlx::query("INSERT INTO botmesh_users (`key`, data) VALUES (?, ?) ON DUPLICATE KEY UPDATE data = VALUES(data)")
            .bind(key)
            .bind(data)
            .execute(&self.pool)
            .await
            .map_err(db("set_user_data"))?;
        Ok(())
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let row = sqlx::query(sql(format!(
            "SELECT data, revision FROM botmesh_checkpoints
             WHERE `key` = ? AND data IS NOT NULL AND (expires_at IS NULL OR expires_at > {NOW})"
        )))
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("get_checkpoint"))?;
        Ok(row.map(|r| CheckpointRecord::new(r.get::<String, _>(0), to_u64(r.get(1)))))
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        let mut conn = self.conn("set_checkpoint").await?;
        let expires = write.ttl.map(ms);
        sqlx::query(sql(format!(
            "INSERT INTO botmesh_checkpoints (`key`, data, revision, expires_at)
             VALUES (?, ?, LAST_INSERT_ID(1), IF(? IS NULL, NULL, {NOW} + ?))
             ON DUPLICATE KEY UPDATE data = VALUES(data), revision = LAST_INSERT_ID(revision + 1),
               expires_at = VALUES(expires_at)"
        )))
        .bind(key)
        .bind(&write.data)
        .bind(expires)
        .bind(expires)
        .execute(&mut *conn)
        .await
        .map_err(db("set_checkpoint"))?;
        Ok(to_u64(last_id(&mut conn).await.map_err(db("set_checkpoint"))?))
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        sqlx::query("UPDATE botmesh_checkpoints SET data = NULL WHERE `key` = ?")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(db("clear_checkpoint"))?;
        Ok(())
    }
}

#[async_trait]
impl CasStore for MySqlStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let mut conn = self.conn("set_checkpoint_if").await?;
        let expires = write.ttl.map(ms);
        let live = format!("data IS NOT NULL AND (expires_at IS NULL OR expires_at > {NOW})");
        let matched = match expected {
            Some(rev) => {
                sqlx::query(sql(format!(
                    "UPDATE botmesh_checkpoints SET revision = LAST_INSERT_ID(revision + 1),
                   expires_at = IF(? IS NULL, NULL, {NOW} + ?), data = ?
                 WHERE `key` = ? AND revision = ? AND {live}"
                )))
                .bind(expires)
                .bind(expires)
                .bind(&write.data)
                .bind(key)
                .bind(to_i64(rev))
                .execute(&mut *conn)
                .await
            }
            None => {
                sqlx::query(sql(format!(
                    "UPDATE botmesh_checkpoints SET revision = LAST_INSERT_ID(revision + 1),
                   expires_at = IF(? IS NULL, NULL, {NOW} + ?), data = ?
                 WHERE `key` = ? AND NOT ({live})"
                )))
                .bind(expires)
                .bind(expires)
                .bind(&write.data)
                .bind(key)
                .execute(&mut *conn)
                .await
            }
        }
        .map_err(db("set_checkpoint_if"))?
        .rows_affected();
        if matched == 1 {
            return Ok(CasOutcome::Written {
                revision: to_u64(last_id(&mut conn).await.map_err(db("set_checkpoint_if"))?),
            });
        }
        if expected.is_none() {
            let inserted = sqlx::query(sql(format!(
                "INSERT IGNORE INTO botmesh_checkpoints (`key`, data, revision, expires_at)
                 VALUES (?, ?, 1, IF(? IS NULL, NULL, {NOW} + ?))"
            )))
            .bind(key)
            .bind(&write.data)
            .bind(expires)
            .bind(expires)
            .execute(&mut *conn)
            .await
            .map_err(db("set_checkpoint_if"))?
            .rows_affected();
            if inserted == 1 {
                return Ok(CasOutcome::Written { revision: 1 });
            }
        }
        drop(conn);
        Ok(CasOutcome::Conflict { current: self.get_checkpoint(key).await?.map(|c| c.revision) })
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let done = sqlx::query(sql(format!(
            "UPDATE botmesh_checkpoints SET data = NULL
             WHERE `key` = ? AND revision = ? AND data IS NOT NULL AND (expires_at IS NULL OR expires_at > {NOW})"
        )))
        .bind(key)
        .bind(to_i64(expected))
        .execute(&self.pool)
        .await
        .map_err(db("clear_checkpoint_if"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl LockStore for MySqlStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let token = uuid::Uuid::new_v4().to_string();
        let mut conn = self.conn("acquire_lock_fenced").await?;
        let taken = sqlx::query(sql(format!(
            "UPDATE botmesh_locks SET token = ?, fence = LAST_INSERT_ID(fence + 1), expires_at = {NOW} + ?
             WHERE `key` = ? AND (token IS NULL OR expires_at <= {NOW})"
        )))
        .bind(&token)
        .bind(ms(ttl))
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(db("acquire_lock_fenced"))?
        .rows_affected();
        if taken == 1 {
            let fence = last_id(&mut conn).await.map_err(db("acquire_lock_fenced"))?;
            return Ok(Some(FencedLock::new(token, to_u64(fence))));
        }
        let inserted = sqlx::query(sql(format!(
            "INSERT IGNORE INTO botmesh_locks (`key`, token, fence, expires_at) VALUES (?, ?, 1, {NOW} + ?)"
        )))
        .bind(key)
        .bind(&token)
        .bind(ms(ttl))
        .execute(&mut *conn)
        .await
        .map_err(db("acquire_lock_fenced"))?
        .rows_affected();
        Ok((inserted == 1).then(|| FencedLock::new(token, 1)))
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let done = sqlx::query(sql(format!(
            "UPDATE botmesh_locks SET expires_at = {NOW} + ? WHERE `key` = ? AND token = ? AND expires_at > {NOW}"
        )))
        .bind(ms(ttl))
        .bind(key)
        .bind(token)
        .execute(&self.pool)
        .await
        .map_err(db("renew_lock"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        let done = sqlx::query(sql(format!(
            "UPDATE botmesh_locks SET token = NULL WHERE `key` = ? AND token = ? AND expires_at > {NOW}"
        )))
        .bind(key)
        .bind(token)
        .execute(&self.pool)
        .await
        .map_err(db("release_lock"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl LeaseStore for MySqlStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let mut conn = self.conn("acquire_lease").await?;
        // Still ours: renew with the same fence.
        let renewed = sqlx::query(sql(format!(
            "UPDATE botmesh_leases SET expires_at = {NOW} + ?, fence = LAST_INSERT_ID(fence)
             WHERE name = ? AND holder = ? AND expires_at > {NOW}"
        )))
        .bind(ms(ttl))
        .bind(name)
        .bind(holder)
        .execute(&mut *conn)
        .await
        .map_err(db("acquire_lease"))?
        .rows_affected();
        if renewed == 1 {
            return Ok(Some(LeaseGrant::new(to_u64(
                last_id(&mut conn).await.map_err(db("acquire_lease"))?,
            ))));
        }
        let taken = sqlx::query(sql(format!(
            "UPDATE botmesh_leases SET holder = ?, fence = LAST_INSERT_ID(fence + 1), expires_at = {NOW} + ?
             WHERE name = ? AND (holder IS NULL OR expires_at <= {NOW})"
        )))
        .bind(holder)
        .bind(ms(ttl))
        .bind(name)
        .execute(&mut *conn)
        .await
        .map_err(db("acquire_lease"))?
        .rows_affected();
        if taken == 1 {
            return Ok(Some(LeaseGrant::new(to_u64(
                last_id(&mut conn).await.map_err(db("acquire_lease"))?,
            ))));
        }
        let inserted = sqlx::query(sql(format!(
            "INSERT IGNORE INTO botmesh_leases (name, holder, fence, expires_at) VALUES (?, ?, 1, {NOW} + ?)"
        )))
        .bind(name)
        .bind(holder)
        .bind(ms(ttl))
        .execute(&mut *conn)
        .await
        .map_err(db("acquire_lease"))?
        .rows_affected();
        Ok((inserted == 1).then(|| LeaseGrant::new(1)))
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let done = sqlx::query(sql(format!(
            "UPDATE botmesh_leases SET expires_at = {NOW} + ? WHERE name = ? AND holder = ? AND expires_at > {NOW}"
        )))
        .bind(ms(ttl))
        .bind(name)
        .bind(holder)
        .execute(&self.pool)
        .await
        .map_err(db("renew_lease"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let done = sqlx::query(sql(format!(
            "UPDATE botmesh_leases SET holder = NULL WHERE name = ? AND holder = ? AND expires_at > {NOW}"
        )))
        .bind(name)
        .bind(holder)
        .execute(&self.pool)
        .await
        .map_err(db("release_lease"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl TaskStore for MySqlStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        let last: Option<i64> = sqlx::query_scalar("SELECT last FROM botmesh_tasks WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("task_last"))?;
        Ok(last.map(to_u64))
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        // A later occurrence over the row, decided by its row lock; else the first one,
        // decided by the primary key. The value only grows, so a changed row is a matched one.
        let occurrence = to_i64(occurrence);
        let moved = sqlx::query("UPDATE botmesh_tasks SET last = ? WHERE id = ? AND last < ?")
            .bind(occurrence)
            .bind(id)
            .bind(occurrence)
            .execute(&self.pool)
            .await
            .map_err(db("task_claim"))?;
        if moved.rows_affected() == 1 {
            return Ok(true);
        }
        let inserted = sqlx::query("INSERT IGNORE INTO botmesh_tasks (id, last) VALUES (?, ?)")
            .bind(id)
            .bind(occurrence)
            .execute(&self.pool)
            .await
            .map_err(db("task_claim"))?;
        Ok(inserted.rows_affected() == 1)
    }
}

#[async_trait]
impl JournalStore for MySqlStore {
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        sqlx::query(sql(format!("DELETE FROM botmesh_inbox WHERE id = ? AND forget_at <= {NOW}")))
            .bind(&record.id)
            .execute(&self.pool)
            .await
            .map_err(db("inbox_append"))?;
        let acked = record.state == InboxState::Acked;
        let inserted = sqlx::query(sql(format!(
            "INSERT IGNORE INTO botmesh_inbox (id, `key`, payload, owner, state, retain_ms, forget_at)
             VALUES (?, ?, ?, ?, ?, ?, IF(?, {NOW} + ?, NULL))"
        )))
        .bind(&record.id)
        .bind(record.key.as_str())
        .bind(&record.payload)
        .bind(&record.owner)
        .bind(if acked { "acked" } else { "pending" })
        .bind(ms(retain))
        .bind(acked)
        .bind(ms(retain))
        .execute(&self.pool)
        .await
        .map_err(db("inbox_append"))?
        .rows_affected();
        if inserted == 1 {
            return Ok(InboxAppend::Appended);
        }
        let state: Option<String> =
            sqlx::query_scalar("SELECT state FROM botmesh_inbox WHERE id = ?")
                .bind(&record.id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db("inbox_append"))?;
        Ok(InboxAppend::Duplicate { state: crate::inbox_state(state.as_deref()) })
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.acknowledge(&[id], "inbox_ack").await
    }

    /// One statement per [`ACK_CHUNK`](crate::ACK_CHUNK) ids.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        self.acknowledge(&ids, "inbox_ack_batch").await
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let row = sqlx::query(sql(format!(
            "SELECT `key`, payload, owner, state FROM botmesh_inbox WHERE id = ? AND (forget_at IS NULL OR forget_at > {NOW})"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("inbox_get"))?;
        Ok(row.map(|r| crate::inbox_record(id, (r.get(0), r.get(1), r.get(2), r.get(3)))))
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        let rows = sqlx::query("SELECT id, `key`, payload, owner FROM botmesh_inbox WHERE state = 'pending' ORDER BY seq LIMIT ?")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db("inbox_pending"))?;
        Ok(rows
            .into_iter()
            .map(|r| crate::pending_record((r.get(0), r.get(1), r.get(2), r.get(3))))
            .collect())
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE botmesh_inbox SET owner = ? WHERE id = ? AND owner = ? AND state = 'pending'",
        )
        .bind(to)
        .bind(id)
        .bind(from)
        .execute(&self.pool)
        .await
        .map_err(db("inbox_claim"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        sqlx::query(sql(format!(
            "INSERT INTO botmesh_outbox (`key`, expires_at) VALUES (?, {NOW} + ?)
             ON DUPLICATE KEY UPDATE expires_at = {NOW} + ?"
        )))
        .bind(key)
        .bind(ms(ttl))
        .bind(ms(ttl))
        .execute(&self.pool)
        .await
        .map_err(db("outbox_mark"))?;
        Ok(())
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        let marked: Option<String> = sqlx::query_scalar(sql(format!(
            "SELECT `key` FROM botmesh_outbox WHERE `key` = ? AND expires_at > {NOW}"
        )))
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("outbox_marked"))?;
        Ok(marked.is_some())
    }
}
