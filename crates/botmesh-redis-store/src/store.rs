//! [`RedisStore`]: `Store` and every capability trait on Redis.
//!
//! Kept whole: `impl Store for RedisStore` and its capability traits, every method of the
//! contract in the contract's order, beside the connection and key handling they share; the
//! journal, which batches its writes, is in `journal.rs`.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error, FencedLock,
    JournalStore, LeaseGrant, LeaseStore, LockStore, Result, Store, TaskStore, async_trait,
};
use redis::{AsyncCommands, Script};

use crate::batch::Batcher;
use crate::call::ScriptCall;
use crate::conn::{Conn, Connect, Source, idempotent, ms, redact};
use crate::coordinator::RedisCoordinator;
use crate::inbox::Inbox;
use crate::keys::Keys;
use crate::replicas;
use crate::scripts;
use crate::{KeyLayout, RedisOptions, Replicas};

/// How long the bookkeeping of a cleared checkpoint, lock or lease (its revision or fence
/// counter) is kept. Past it, the counter restarts from the server clock, above every value
/// it handed out.
const KEEP: Duration = Duration::from_secs(24 * 3600);

/// A [`Store`] on Redis, shared by every replica of a bot.
///
/// Every compare-and-set (checkpoints, locks, leases, the inbox) is one Lua script, so it is
/// atomic on the server; no method reads and then writes from the client. The connection
/// reconnects by itself after a drop (through Sentinel, to the master the sentinels name).
///
/// ```no_run
/// # async fn demo() -> Result<(), botmesh_traits::Error> {
/// use std::time::Duration;
/// use botmesh_redis_store::RedisStore;
///
/// let store = RedisStore::new("redis://127.0.0.1:6379/", "shop").await?;
/// let coordinator = store.coordinator(Duration::from_secs(15));
/// # let _ = coordinator; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) conn: Conn,
    /// Where its coordinators subscribe and open their heartbeat connections.
    pub(crate) source: Source,
    pub(crate) keys: Keys,
    pub(crate) options: RedisOptions,
    /// Journal appends, acknowledgements and outbox marks, in batches; made by the first.
    pub(crate) journal: Arc<std::sync::OnceLock<Batcher<Inbox>>>,
    /// Names this store's journal for its coordinators (see `JournalStore::place`): a nonce,
    /// shared by its clones.
    pub(crate) place: Arc<str>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("urls", &self.options.urls.iter().map(|u| redact(u)).collect::<Vec<_>>())
            .field("prefix", &self.options.prefix)
            .field("layout", &self.options.layout)
            .finish()
    }
}

/// The store's scripts and its coordinator's, which shares the connection: one round trip.
async fn preload_all(conn: &Conn) {
    let all: Vec<&scripts::Lua> =
        scripts::STORE.iter().chain(&scripts::COORDINATION).copied().collect();
    scripts::preload(conn, &all).await;
}

fn parse_u64(what: &str, s: &str) -> Result<u64> {
    s.parse::<u64>().map_err(|e| Error::corrupt(format!("{what} {s:?}"), e))
}

impl RedisStore {
    /// Connects to one Redis server. `url` may carry a user and password
    /// (`redis://user:pass@host:6379/0`) and use TLS (`rediss://`, with rustls), or name the
    /// sentinels of a Redis they fail over (`redis+sentinel://h1:26379,h2:26379/mymaster`, see
    /// [`RedisOptions`]).
    ///
    /// A URL that does not parse, or sentinels that know no master of the name given, are an
    /// [`Error::Configuration`]; a server (or every sentinel) out of reach is an
    /// [`Error::CoordinationUnavailable`].
    pub async fn new(url: &str, prefix: &str) -> Result<Self> {
        Self::connect(RedisOptions::new(url, prefix)).await
    }

    /// Connects with full options (a cluster, Sentinel, timeouts, waiting for replicas).
    pub async fn connect(options: RedisOptions) -> Result<Self> {
        let (conn, source) = Connect::from(&options).open().await?;
        preload_all(&conn).await;
        Ok(Self {
            conn,
            source,
            keys: Keys::new(&options.prefix, options.layout),
            options,
            journal: Arc::default(),
            place: uuid::Uuid::new_v4().simple().to_string().into(),
        })
    }

    /// A store on a `redis::Client` the application already has, with keys under `prefix` in
    /// the standalone layout and the default timeouts. The store opens its own connection
    /// manager from the client (it reconnects on its own); its coordinator subscribes through
    /// the same client.
    pub async fn from_client(client: redis::Client, prefix: &str) -> Result<Self> {
        let address = client.get_connection_info().addr().to_string();
        let options = RedisOptions::new(&format!("redis://{address}"), prefix);
        let conn = Connect::from(&options).open_single(client.clone()).await?;
        preload_all(&conn).await;
        Ok(Self {
            conn,
            source: Source::Client(client),
            keys: Keys::new(&options.prefix, options.layout),
            options,
            journal: Arc::default(),
            place: uuid::Uuid::new_v4().simple().to_string().into(),
        })
    }

    /// A coordinator sharing this store's connection, prefix and layout, with a random replica
    /// id (see [`RedisCoordinator::with_replica_id`]) and heartbeat lease `lease`: the one
    /// setting of the lease, which the coordination runtime renews every third of.
    ///
    /// In the standalone layout it also writes this store's journal
    /// ([`TurnJournal`](botmesh_traits::TurnJournal)): a bot with durability journals each
    /// message in the call that takes its ticket, and acknowledges it in the call that gives
    /// its turn back, one script call each instead of two.
    pub fn coordinator(&self, lease: Duration) -> RedisCoordinator {
        let journal = (self.keys.layout() == KeyLayout::Standalone).then(|| self.clone());
        RedisCoordinator::from_parts(
            self.conn.clone(),
            self.source.clone(),
            self.keys.clone(),
            &self.options,
            lease,
            journal,
        )
    }

    /// The key layout.
    pub fn layout(&self) -> KeyLayout {
        self.keys.layout()
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }
}

#[async_trait]
impl Store for RedisStore {
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
        // Sets the fields and keeps the latest `last`: the same call twice is one call.
        let key = &self.keys.entity("chat", chat.id.as_str());
        idempotent(|| async move {
            scripts::UPSERT_CHAT
                .get()
                .key(key)
                .arg(&chat.provider)
                .arg(chat.last_seen_ms.max(chat.first_seen_ms))
                .arg(chat.lang.as_deref().unwrap_or(""))
                .invoke_async::<i64>(&mut self.conn())
                .await
        })
        .await
        .map(drop)
        .map_err(|e| Error::store("upsert_chat", e))
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        let key = self.keys.entity("chat", id.as_str());
        let fields: Vec<Option<String>> =
            self.hmget("get_chat", &key, &["provider", "first", "last", "lang"]).await?;
        let [Some(provider), Some(first), Some(last), lang] =
            <[Option<String>; 4]>::try_from(fields)
                .map_err(|_| Error::corrupt("chat record", "wrong field count"))?
        else {
            return Ok(None);
        };
        let mut record = ChatRecord::new(id.clone(), provider, parse_u64("first_seen", &first)?);
        record.last_seen_ms = parse_u64("last_seen", &last)?;
        record.lang = lang;
        Ok(Some(record))
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        let key = &self.keys.entity("user", key);
        idempotent(|| async move { self.conn().get(key).await })
            .await
            .map_err(|e| Error::store("get_user_data", e))
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        let key = &self.keys.entity("user", key);
        idempotent(|| async move { self.conn().set::<_, _, ()>(key, data).await })
            .await
            .map_err(|e| Error::store("set_user_data", e))
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let key = self.keys.entity("cp", key);
        let (data, rev): (Option<String>, Option<String>) =
            self.hmget("get_checkpoint", &key, &["d", "r"]).await?;
        match (data, rev) {
            (Some(data), Some(rev)) => {
                Ok(Some(CheckpointRecord::new(data, parse_u64("revision", &rev)?)))
            }
            _ => Ok(None),
        }
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        match self.write_checkpoint("set_checkpoint", key, write, "any", None).await? {
            CasOutcome::Written { revision } => Ok(revision),
            _ => Err(Error::corrupt("set_checkpoint reply", "an unconditional write was refused")),
        }
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        self.clear("clear_checkpoint", key, None).await.map(drop)
    }
}

#[async_trait]
impl CasStore for RedisStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let mode = if expected.is_some() { "rev" } else { "absent" };
        self.write_checkpoint("set_checkpoint_if", key, write, mode, expected).await
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        self.clear("clear_checkpoint_if", key, Some(expected)).await
    }
}

#[async_trait]
impl LockStore for RedisStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let token = uuid::Uuid::new_v4().to_string();
        let lock = self.keys.entity("lock", key);
        let mut call = ScriptCall::new(scripts::ACQUIRE_LOCK.get(), 1, 3, lock.len() + 64);
        call.arg(&lock).arg(&token).arg(ms(ttl));
        let fence: Option<String> =
            match replicas::script(&call, &mut self.conn(), self.replicas()).await {
                Ok(fence) => fence,
                Err(e) => {
                    if replicas::is_refused(&e) {
                        // Taken on the master, maybe, but not replicated: nobody got the token,
                        // so the lock is given back, and the next try can take it (best effort;
                        // otherwise it expires with its ttl).
                        let _ = self.release_lock(key, &token).await;
                    }
                    return Err(replicas::store_error("acquire_lock_fenced", e));
                }
            };
        fence.map(|f| Ok(FencedLock::new(token, parse_u64("fence", &f)?))).transpose()
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        self.flag(
            scripts::RENEW_LOCK.get(),
            "renew_lock",
            self.keys.entity("lock", key),
            token,
            ms(ttl),
            self.replicas(),
        )
        .await
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        self.flag(
            scripts::RELEASE_LOCK.get(),
            "release_lock",
            self.keys.entity("lock", key),
            token,
            ms(KEEP),
            None,
        )
        .await
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    /// With [`RedisOptions::wait_for_replicas`], a lease taken but not replicated in time is
    /// reported as [`Error::CoordinationUnavailable`]; the holder's next try gets it back (the
    /// script is re-entrant for its holder).
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let lease = self.keys.entity("lease", name);
        let mut call =
            ScriptCall::new(scripts::ACQUIRE_LEASE.get(), 1, 3, lease.len() + holder.len() + 24);
        call.arg(&lease).arg(holder).arg(ms(ttl));
        let fence: Option<String> = replicas::script(&call, &mut self.conn(), self.replicas())
            .await
            .map_err(|e| replicas::store_error("acquire_lease", e))?;
        fence.map(|f| Ok(LeaseGrant::new(parse_u64("fence", &f)?))).transpose()
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.flag(
            scripts::RENEW_LEASE.get(),
            "renew_lease",
            self.keys.entity("lease", name),
            holder,
            ms(ttl),
            self.replicas(),
        )
        .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        self.flag(
            scripts::RELEASE_LEASE.get(),
            "release_lease",
            self.keys.entity("lease", name),
            holder,
            ms(KEEP),
            None,
        )
        .await
    }
}

#[async_trait]
impl TaskStore for RedisStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        let key = &self.keys.entity("task", id);
        let last: Option<String> = idempotent(|| async move { self.conn().get(key).await })
            .await
            .map_err(|e| Error::store("task_last", e))?;
        last.map(|l| l.parse::<u64>().map_err(|e| Error::corrupt(format!("task record {id}"), e)))
            .transpose()
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        // Sent once: a claim whose reply was lost (or that was not replicated in time) is not
        // tried again, so the occurrence may be skipped, never run twice.
        let task = self.keys.entity("task", id);
        let mut call = ScriptCall::new(scripts::TASK_CLAIM.get(), 1, 2, task.len() + 24);
        call.arg(&task).arg(occurrence.to_string());
        let claimed: i64 = replicas::script(&call, &mut self.conn(), self.replicas())
            .await
            .map_err(|e| replicas::store_error("task_claim", e))?;
        Ok(claimed == 1)
    }
}

impl RedisStore {
    /// `HMGET key fields`, sent again if the connection drops under it.
    pub(crate) async fn hmget<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        key: &str,
        fields: &[&str],
    ) -> Result<T> {
        idempotent(|| async move {
            redis::cmd("HMGET").arg(key).arg(fields).query_async(&mut self.conn()).await
        })
        .await
        .map_err(|e| Error::store(op, e))
    }

    async fn write_checkpoint(
        &self,
        op: &'static str,
        key: &str,
        write: &CheckpointWrite,
        mode: &str,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let checkpoint = &self.keys.entity("cp", key);
        let bytes = checkpoint.len() + write.data.len() + 80;
        let mut call = ScriptCall::new(scripts::SET_CHECKPOINT.get(), 1, 6, bytes);
        call.arg(checkpoint)
            .arg(mode)
            .arg(expected.map(|e| e.to_string()).unwrap_or_default())
            .arg(&write.data)
            .arg(write.ttl.map(|t| ms(t).to_string()).unwrap_or_default())
            .arg(ms(KEEP));
        let call = &call;
        let send = || async move {
            replicas::script::<(i64, String)>(call, &mut self.conn(), self.replicas()).await
        };
        let (written, rev) = match send().await {
            Ok(reply) => reply,
            Err(e) if e.is_connection_dropped() => {
                // The write may have landed before the connection dropped. A checkpoint that
                // now holds this very document under a new revision is that write; otherwise
                // the same conditional write goes again: it lands if the first did not, and is
                // refused if a newer owner wrote meanwhile.
                match self.get_checkpoint(key).await? {
                    Some(now) if now.data == write.data && Some(now.revision) != expected => {
                        return Ok(CasOutcome::Written { revision: now.revision });
                    }
                    _ => send().await.map_err(|e| replicas::store_error(op, e))?,
                }
            }
            Err(e) => return Err(replicas::store_error(op, e)),
        };
        let rev = if rev.is_empty() { None } else { Some(parse_u64("revision", &rev)?) };
        Ok(match (written, rev) {
            (1, Some(revision)) => CasOutcome::Written { revision },
            (_, current) => CasOutcome::Conflict { current },
        })
    }

    /// Clears a checkpoint (at revision `expected`), sent again after a drop: a clear that
    /// landed the first time leaves nothing for the second to clear.
    async fn clear(&self, op: &'static str, key: &str, expected: Option<u64>) -> Result<bool> {
        let checkpoint = &self.keys.entity("cp", key);
        let mut call =
            ScriptCall::new(scripts::CLEAR_CHECKPOINT.get(), 1, 3, checkpoint.len() + 48);
        call.arg(checkpoint).arg(expected.map(|e| e.to_string()).unwrap_or_default()).arg(ms(KEEP));
        let call = &call;
        let n: i64 = idempotent(|| async move {
            replicas::script(call, &mut self.conn(), self.replicas()).await
        })
        .await
        .map_err(|e| replicas::store_error(op, e))?;
        Ok(n == 1)
    }

    /// A script on one key with two arguments that answers 1 or 0, waiting for `replicas`.
    async fn flag(
        &self,
        script: &Script,
        op: &'static str,
        key: String,
        who: &str,
        ms: u64,
        replicas: Option<Replicas>,
    ) -> Result<bool> {
        let mut call = ScriptCall::new(script, 1, 3, key.len() + who.len() + 24);
        call.arg(&key).arg(who).arg(ms);
        let n: i64 = replicas::script(&call, &mut self.conn(), replicas)
            .await
            .map_err(|e| replicas::store_error(op, e))?;
        Ok(n == 1)
    }

    /// The replicas a grant waits for.
    fn replicas(&self) -> Option<Replicas> {
        self.options.replicas
    }
}
