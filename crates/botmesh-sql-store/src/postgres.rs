//! [`PostgresStore`].
//!
//! Kept whole: `impl Store for PostgresStore` and its capability traits, every method of the
//! contract in the contract's order, as in the SQLite and MySQL stores, so the three read side
//! by side.

use std::time::Duration;

use botmesh_traits::{
    BoxError, CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error,
    FencedLock, InboxAppend, InboxRecord, InboxState, JournalStore, LeaseGrant, LeaseStore,
    LockStore, Result, Store, TaskStore, async_trait,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor, Row};

/// The schema, one entry per version. Applied in order; never edit a released entry.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE botmesh_chats (
  id TEXT PRIMARY KEY, provider TEXT NOT NULL, lang TEXT,
  first_seen_ms BIGINT NOT NULL, last_seen_ms BIGINT NOT NULL);
CREATE TABLE botmesh_users (key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE botmesh_checkpoints (
  key TEXT PRIMARY KEY, data TEXT, revision BIGINT NOT NULL, expires_at TIMESTAMPTZ);
CREATE TABLE botmesh_locks (
  key TEXT PRIMARY KEY, token TEXT, fence BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
CREATE TABLE botmesh_leases (
  name TEXT PRIMARY KEY, holder TEXT, fence BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
CREATE TABLE botmesh_inbox (
  id TEXT PRIMARY KEY, key TEXT NOT NULL, payload TEXT NOT NULL, owner TEXT NOT NULL,
  state TEXT NOT NULL, seq BIGSERIAL, retain_ms BIGINT NOT NULL, forget_at TIMESTAMPTZ);
CREATE INDEX botmesh_inbox_pending ON botmesh_inbox (seq) WHERE state = 'pending';
CREATE TABLE botmesh_outbox (key TEXT PRIMARY KEY, expires_at TIMESTAMPTZ NOT NULL);
",
    r"
CREATE TABLE botmesh_tasks (id TEXT PRIMARY KEY, last BIGINT NOT NULL);
",
];

/// A `$n` milliseconds-from-now timestamp, on the database's clock.
const IN_MS: &str = "(now() + ($N::BIGINT * interval '1 millisecond'))";

fn after(n: usize) -> String {
    IN_MS.replace("$N", &format!("${n}"))
}

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

/// How to reach PostgreSQL.
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
pub struct PostgresOptions {
    url: String,
    max_connections: u32,
    acquire_timeout: Duration,
    migrate: bool,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PostgresOptions")
            .field("url", &botmesh_traits::redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl PostgresOptions {
    /// A database at `url` (`postgres://user@host:5432/db`).
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

    /// Whether to apply the embedded schema on connect (the default). Turn it off when
    /// migrations are run by a deploy step instead.
    pub fn migrate(mut self, yes: bool) -> Self {
        self.migrate = yes;
        self
    }
}

/// A [`Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Acknowledges journaled messages `ids` in one statement; `op` names the call in errors.
    async fn acknowledge(&self, ids: &[&str], op: &'static str) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "UPDATE botmesh_inbox SET state = 'acked', forget_at = now() + (retain_ms * interval '1 millisecond') WHERE id = ANY($1)",
        )
        .bind(ids)
        .execute(&self.pool)
        .await
        .map_err(db(op))?;
        Ok(())
    }

    /// Connects to `url` with the default options.
    pub async fn new(url: impl Into<String>) -> Result<Self> {
        Self::connect(PostgresOptions::new(url)).await
    }

    /// A store on a pool the application already has. The schema is not applied: call
    /// [`migrate`](Self::migrate) once (it is idempotent, and safe from replicas starting
    /// together) unless your deployment applies it.
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Connects, and applies the schema unless told not to.
    pub async fn connect(options: PostgresOptions) -> Result<Self> {
        let connect: PgConnectOptions = options.url.parse().map_err(|e: sqlx::Error| {
            Error::Configuration(BoxError::from(format!("invalid PostgreSQL URL: {e}")))
        })?;
        let pool = PgPoolOptions::new()
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
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the embedded schema versions not applied yet, under an advisory lock so that
    /// replicas starting together apply each once.
    pub async fn migrate(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(db("migrate"))?;
        conn.execute("SELECT pg_advisory_lock(7206531180)").await.map_err(db("migrate"))?;
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
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
                let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(db("migrate"))?;
                tx.execute(*sql).await.map_err(db("migrate"))?;
                sqlx::query("INSERT INTO botmesh_schema (version) VALUES ($1)")
                    .bind(i32::try_from(i + 1).unwrap_or(i32::MAX))
                    .execute(&mut *tx)
                    .await
                    .map_err(db("migrate"))?;
                tx.commit().await.map_err(db("migrate"))?;
            }
            Ok(())
        }
        .await;
        conn.execute("SELECT pg_advisory_unlock(7206531180)").await.map_err(db("migrate"))?;
        applied
    }

    async fn current_revision(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.get_checkpoint(key).await?.map(|c| c.revision))
    }
}

#[async_trait]
impl Store for PostgresStore {
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
            "INSERT INTO botmesh_chats (id, provider, lang, first_seen_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider,
               lang = COALESCE(EXCLUDED.lang, botmesh_chats.lang),
               last_seen_ms = GREATEST(botmesh_chats.last_seen_ms, EXCLUDED.last_seen_ms)",
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
            "SELECT provider, lang, first_seen_ms, last_seen_ms FROM botmesh_chats WHERE id = $1",
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
        sqlx::query_scalar("SELECT data FROM botmesh_users WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("get_user_data"))
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO botmesh_users (key, data) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
        )
        .bind(key)
        .bind(data)
        .execute(&self.pool)
        .await
        .map_err(db("set_user_data"))?;
        Ok(())
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let row = sqlx::query(
            "SELECT data, revision FROM botmesh_checkpoints
             WHERE key = $1 AND data IS NOT NULL AND (expires_at IS NULL OR expires_at > now())",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("get_checkpoint"))?;
        Ok(row.map(|r| CheckpointRecord::new(r.get::<String, _>(0), to_u64(r.get(1)))))
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        let sql = format!(
            "INSERT INTO botmesh_checkpoints (key, data, revision, expires_at)
             VALUES ($1, $2, 1, CASE WHEN $3::BIGINT IS NULL THEN NULL ELSE {} END)
             ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data,
               revision = botmesh_checkpoints.revision + 1, expires_at = EXCLUDED.expires_at
             RETURNING revision",
            after(3)
        );
        let rev: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(key)
            .bind(&write.data)
            .bind(write.ttl.map(ms))
            .fetch_one(&self.pool)
            .await
            .map_err(db("set_checkpoint"))?;
        Ok(to_u64(rev))
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        sqlx::query("UPDATE botmesh_checkpoints SET data = NULL WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(db("clear_checkpoint"))?;
        Ok(())
    }
}

#[async_trait]
impl CasStore for PostgresStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let expires = format!("CASE WHEN $3::BIGINT IS NULL THEN NULL ELSE {} END", after(3));
        let live = "botmesh_checkpoints.data IS NOT NULL AND (botmesh_checkpoints.expires_at IS NULL OR botmesh_checkpoints.expires_at > now())";
        let written: Option<i64> = match expected {
            Some(rev) => {
                let sql = format!(
                    "UPDATE botmesh_checkpoints SET data = $2, revision = revision + 1, expires_at = {expires}
                     WHERE key = $1 AND revision = $4 AND {live} RETURNING revision"
                );
                sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(key)
                    .bind(&write.data)
                    .bind(write.ttl.map(ms))
                    .bind(to_i64(rev))
                    .fetch_optional(&self.pool)
                    .await
            }
            None => {
                let sql = format!(
                    "INSERT INTO botmesh_checkpoints (key, data, revision, expires_at) VALUES ($1, $2, 1, {expires})
                     ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data,
                       revision = botmesh_checkpoints.revision + 1, expires_at = EXCLUDED.expires_at
                     WHERE NOT ({live}) RETURNING revision"
                );
                sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(key)
                    .bind(&write.data)
                    .bind(write.ttl.map(ms))
                    .fetch_optional(&self.pool)
                    .await
            }
        }
        .map_err(db("set_checkpoint_if"))?;
        Ok(match written {
            Some(rev) => CasOutcome::Written { revision: to_u64(rev) },
            None => CasOutcome::Conflict { current: self.current_revision(key).await? },
        })
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE botmesh_checkpoints SET data = NULL
             WHERE key = $1 AND revision = $2 AND data IS NOT NULL AND (expires_at IS NULL OR expires_at > now())",
        )
        .bind(key)
        .bind(to_i64(expected))
        .execute(&self.pool)
        .await
        .map_err(db("clear_checkpoint_if"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl LockStore for PostgresStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let token = uuid::Uuid::new_v4().to_string();
        let sql = format!(
            "INSERT INTO botmesh_locks (key, token, fence, expires_at) VALUES ($1, $2, 1, {})
             ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, fence = botmesh_locks.fence + 1,
               expires_at = EXCLUDED.expires_at
             WHERE botmesh_locks.token IS NULL OR botmesh_locks.expires_at <= now()
             RETURNING fence",
            after(3)
        );
        let fence: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(key)
            .bind(&token)
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db("acquire_lock_fenced"))?;
        Ok(fence.map(|f| FencedLock::new(token, to_u64(f))))
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let sql = format!(
            "UPDATE botmesh_locks SET expires_at = {} WHERE key = $1 AND token = $2 AND expires_at > now()",
            after(3)
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(key)
            .bind(token)
            .bind(ms(ttl))
            .execute(&self.pool)
            .await;
        Ok(done.map_err(db("renew_lock"))?.rows_affected() == 1)
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE botmesh_locks SET token = NULL WHERE key = $1 AND token = $2 AND expires_at > now()",
        )
        .bind(key)
        .bind(token)
        .execute(&self.pool)
        .await
        .map_err(db("release_lock"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let sql = format!(
            "INSERT INTO botmesh_leases (name, holder, fence, expires_at) VALUES ($1, $2, 1, {})
             ON CONFLICT (name) DO UPDATE SET
               fence = CASE WHEN botmesh_leases.holder = EXCLUDED.holder AND botmesh_leases.expires_at > now()
                 THEN botmesh_leases.fence ELSE botmesh_leases.fence + 1 END,
               holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
             WHERE botmesh_leases.holder IS NULL OR botmesh_leases.expires_at <= now()
               OR botmesh_leases.holder = EXCLUDED.holder
             RETURNING fence",
            after(3)
        );
        let fence: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(name)
            .bind(holder)
            .bind(ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(db("acquire_lease"))?;
        Ok(fence.map(|f| LeaseGrant::new(to_u64(f))))
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let sql = format!(
            "UPDATE botmesh_leases SET expires_at = {} WHERE name = $1 AND holder = $2 AND expires_at > now()",
            after(3)
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .bind(holder)
            .bind(ms(ttl))
            .execute(&self.pool)
            .await;
        Ok(done.map_err(db("renew_lease"))?.rows_affected() == 1)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE botmesh_leases SET holder = NULL WHERE name = $1 AND holder = $2 AND expires_at > now()",
        )
        .bind(name)
        .bind(holder)
        .execute(&self.pool)
        .await
        .map_err(db("release_lease"))?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl TaskStore for PostgresStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        let last: Option<i64> = sqlx::query_scalar("SELECT last FROM botmesh_tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("task_last"))?;
        Ok(last.map(to_u64))
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        // One statement: the row lock decides between replicas claiming the same occurrence.
        let claimed = sqlx::query(
            "INSERT INTO botmesh_tasks (id, last) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET last = EXCLUDED.last
             WHERE botmesh_tasks.last < EXCLUDED.last",
        )
        .bind(id)
        .bind(to_i64(occurrence))
        .execute(&self.pool)
        .await
        .map_err(db("task_claim"))?;
        Ok(claimed.rows_affected() == 1)
    }
}

#[async_trait]
impl JournalStore for PostgresStore {
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        // An acknowledged id past its retention is forgotten first. (A data-modifying CTE
        // would not do: the insert's conflict check runs on the same snapshot.)
        sqlx::query("DELETE FROM botmesh_inbox WHERE id = $1 AND forget_at <= now()")
            .bind(&record.id)
            .execute(&self.pool)
            .await
            .map_err(db("inbox_append"))?;
        let acked = record.state == InboxState::Acked;
        let sql = format!(
            "INSERT INTO botmesh_inbox (id, key, payload, owner, state, retain_ms, forget_at)
             VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7 THEN {} ELSE NULL END)
             ON CONFLICT (id) DO NOTHING RETURNING id",
            after(6)
        );
        let inserted: Option<String> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(&record.id)
            .bind(record.key.as_str())
            .bind(&record.payload)
            .bind(&record.owner)
            .bind(if acked { "acked" } else { "pending" })
            .bind(ms(retain))
            .bind(acked)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("inbox_append"))?;
        if inserted.is_some() {
            return Ok(InboxAppend::Appended);
        }
        let state: Option<String> =
            sqlx::query_scalar("SELECT state FROM botmesh_inbox WHERE id = $1")
                .bind(&record.id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db("inbox_append"))?;
        Ok(InboxAppend::Duplicate { state: crate::inbox_state(state.as_deref()) })
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.acknowledge(&[id], "inbox_ack").await
    }

    /// One statement for the whole batch.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        self.acknowledge(&ids, "inbox_ack_batch").await
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let row = sqlx::query(
            "SELECT key, payload, owner, state FROM botmesh_inbox WHERE id = $1 AND (forget_at IS NULL OR forget_at > now())",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("inbox_get"))?;
        Ok(row.map(|r| crate::inbox_record(id, (r.get(0), r.get(1), r.get(2), r.get(3)))))
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        let rows = sqlx::query(
            "SELECT id, key, payload, owner FROM botmesh_inbox WHERE state = 'pending' ORDER BY seq LIMIT $1",
        )
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
        let done = sqlx::query("UPDATE botmesh_inbox SET owner = $3 WHERE id = $1 AND owner = $2 AND state = 'pending'")
            .bind(id)
            .bind(from)
            .bind(to)
            .execute(&self.pool)
            .await
            .map_err(db("inbox_claim"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        let sql = format!(
            "INSERT INTO botmesh_outbox (key, expires_at) VALUES ($1, {})
             ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at",
            after(2)
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(key)
            .bind(ms(ttl))
            .execute(&self.pool)
            .await
            .map_err(db("outbox_mark"))?;
        Ok(())
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        let marked: Option<String> = sqlx::query_scalar(
            "SELECT key FROM botmesh_outbox WHERE key = $1 AND expires_at > now()",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("outbox_marked"))?;
        Ok(marked.is_some())
    }
}
