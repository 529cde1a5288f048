//! The state side: chats, user data and flow checkpoints ([`Store`]), and the optional
//! capabilities replicas need: compare-and-set, locks, leases, task records, the inbox journal
//! and the outbox.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{ChatId, ChatKey, Result};

/// What the store knows about a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatRecord {
    /// The chat.
    pub id: ChatId,
    /// The provider it talks through.
    pub provider: String,
    /// The language last seen or chosen for the chat.
    pub lang: Option<String>,
    /// When the bot first saw the chat, in milliseconds since the Unix epoch.
    pub first_seen_ms: u64,
    /// When the bot last saw the chat, in milliseconds since the Unix epoch.
    pub last_seen_ms: u64,
}

impl ChatRecord {
    /// A chat first and last seen at `now_ms`.
    pub fn new(id: ChatId, provider: impl Into<String>, now_ms: u64) -> Self {
        Self {
            id,
            provider: provider.into(),
            lang: None,
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
        }
    }
}

/// A checkpoint to write.
///
/// `data` is opaque JSON text produced by the runtime; the store keeps it as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointWrite {
    /// The checkpoint document.
    pub data: String,
    /// When set, the checkpoint disappears this long after the write.
    pub ttl: Option<Duration>,
}

impl CheckpointWrite {
    /// A checkpoint that does not expire.
    pub fn new(data: impl Into<String>) -> Self {
        Self { data: data.into(), ttl: None }
    }

    /// Makes the checkpoint expire `ttl` after this write.
    pub fn with_ttl(mut self, ttl: impl Into<Option<Duration>>) -> Self {
        self.ttl = ttl.into();
        self
    }
}

/// A checkpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointRecord {
    /// The checkpoint document.
    pub data: String,
    /// The revision of this write. Revisions of one key strictly increase with every write,
    /// also across a clear, so a stale writer can never match a newer row.
    pub revision: u64,
}

impl CheckpointRecord {
    /// A record with its revision.
    pub fn new(data: impl Into<String>, revision: u64) -> Self {
        Self { data: data.into(), revision }
    }
}

/// The result of a compare-and-set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CasOutcome {
    /// The write landed with this revision.
    Written {
        /// The new revision.
        revision: u64,
    },
    /// The stored revision was not the expected one; nothing was written.
    Conflict {
        /// The revision found, or `None` when there was no checkpoint.
        current: Option<u64>,
    },
}

/// A lock acquired with [`LockStore::acquire_lock_fenced`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedLock {
    /// Proves ownership to [`LockStore::renew_lock`] and [`LockStore::release_lock`].
    pub token: String,
    /// Grows with every acquisition of the key. A resource that remembers the highest fence it
    /// saw can refuse a write from a holder that stalled past its lock.
    pub fence: u64,
}

impl FencedLock {
    /// A lock with its token and fence.
    pub fn new(token: impl Into<String>, fence: u64) -> Self {
        Self { token: token.into(), fence }
    }
}

/// A lease granted by [`LeaseStore::acquire_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseGrant {
    /// Grows with every change of holder.
    pub fence: u64,
}

impl LeaseGrant {
    /// A grant with its fence.
    pub fn new(fence: u64) -> Self {
        Self { fence }
    }
}

/// The state of a journaled inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InboxState {
    /// Journaled, not yet acknowledged: replayed if its owner dies.
    Pending,
    /// Its effect is stored; kept only to drop duplicates.
    Acked,
}

/// An inbound message in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxRecord {
    /// The dedupe id: the provider and its message id.
    pub id: String,
    /// The chat key the message belongs to.
    pub key: ChatKey,
    /// The message, as JSON text.
    pub payload: String,
    /// The replica incarnation that owns it while pending.
    pub owner: String,
    /// Pending or acknowledged.
    pub state: InboxState,
}

impl InboxRecord {
    /// A pending record owned by `owner`.
    pub fn pending(
        id: impl Into<String>,
        key: impl Into<ChatKey>,
        payload: impl Into<String>,
        owner: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            key: key.into(),
            payload: payload.into(),
            owner: owner.into(),
            state: InboxState::Pending,
        }
    }

    /// The same record in state `state`.
    pub fn with_state(mut self, state: InboxState) -> Self {
        self.state = state;
        self
    }
}

/// The result of [`JournalStore::inbox_append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxAppend {
    /// The record is new.
    Appended,
    /// A record with this id was already journaled.
    Duplicate {
        /// Its state.
        state: InboxState,
    },
}

/// Where a bot keeps its state.
///
/// The required methods cover what a single-process bot needs: chats, per-user data and flow
/// checkpoints. What replicas need comes in optional capability traits a store opts into:
///
/// - [`CasStore`] ([`Store::cas`]): atomic compare-and-set of checkpoints, for checkpoint
///   writes under coordination.
/// - [`LockStore`] ([`Store::locks`]): fenced locks, for exclusive resources (a WhatsApp Web
///   session).
/// - [`LeaseStore`] ([`Store::leases`]): named leases, for who runs a durable task without
///   coordination.
/// - [`TaskStore`] ([`Store::tasks`]): durable task records, one atomic claim per occurrence.
/// - [`JournalStore`] ([`Store::journal`]): the inbox journal and the outbox, for durability.
///
/// A store opts into a capability by implementing its trait and returning `Some(self)` from
/// the accessor; the runtime asks the accessor before it relies on the capability. A store
/// cannot claim a capability it does not implement (`Some(self)` does not compile without the
/// trait), but a trait implemented without its accessor goes unused: every accessor defaults
/// to `None`.
/// [`Store::shared`] says whether other processes see the same data.
///
/// Keys are opaque strings built by the runtime. Times to live are honoured by the store; an
/// expired entry behaves exactly as a missing one.
///
/// # Example: a store with compare-and-set checkpoints
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Mutex, MutexGuard, PoisonError};
///
/// use botmesh_traits::{
///     CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Result,
///     Store, async_trait,
/// };
///
/// #[derive(Default)]
/// struct MyStore {
///     chats: Mutex<HashMap<ChatId, ChatRecord>>,
///     users: Mutex<HashMap<String, String>>,
///     // Checkpoint rows by key, and the last revision handed out.
///     rows: Mutex<(HashMap<String, CheckpointRecord>, u64)>,
/// }
///
/// // No code runs under these locks that could panic and poison them; a poisoned one is
/// // still taken rather than turned into a panic of the caller.
/// fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
///     m.lock().unwrap_or_else(PoisonError::into_inner)
/// }
///
/// #[async_trait]
/// impl Store for MyStore {
///     // Opting in: the runtime finds the capability here.
///     fn cas(&self) -> Option<&dyn CasStore> {
///         Some(self)
///     }
///
///     async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
///         let mut chats = lock(&self.chats);
///         let first_seen_ms = chats.get(&chat.id).map_or(chat.first_seen_ms, |c| c.first_seen_ms);
///         let mut chat = chat.clone();
///         chat.first_seen_ms = first_seen_ms;
///         chats.insert(chat.id.clone(), chat);
///         Ok(())
///     }
///
///     async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
///         Ok(lock(&self.chats).get(id).cloned())
///     }
///
///     async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
///         Ok(lock(&self.users).get(key).cloned())
///     }
///
///     async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
///         lock(&self.users).insert(key.to_owned(), data.to_owned());
///         Ok(())
///     }
///
///     async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
///         Ok(lock(&self.rows).0.get(key).cloned())
///     }
///
///     async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
///         // (A real store honours `write.ttl`; this one keeps rows forever.)
///         let (rows, last) = &mut *lock(&self.rows);
///         *last += 1;
///         rows.insert(key.to_owned(), CheckpointRecord::new(write.data.clone(), *last));
///         Ok(*last)
///     }
///
///     async fn clear_checkpoint(&self, key: &str) -> Result<()> {
///         lock(&self.rows).0.remove(key);
///         Ok(())
///     }
/// }
///
/// #[async_trait]
/// impl CasStore for MyStore {
///     async fn set_checkpoint_if(
///         &self,
///         key: &str,
///         write: &CheckpointWrite,
///         expected: Option<u64>,
///     ) -> Result<CasOutcome> {
///         // One lock around the read and the write makes them one atomic operation.
///         let (rows, last) = &mut *lock(&self.rows);
///         let current = rows.get(key).map(|r| r.revision);
///         if current != expected {
///             return Ok(CasOutcome::Conflict { current });
///         }
///         *last += 1;
///         rows.insert(key.to_owned(), CheckpointRecord::new(write.data.clone(), *last));
///         Ok(CasOutcome::Written { revision: *last })
///     }
///
///     async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
///         let (rows, _) = &mut *lock(&self.rows);
///         if rows.get(key).is_some_and(|r| r.revision == expected) {
///             rows.remove(key);
///             return Ok(true);
///         }
///         Ok(false)
///     }
/// }
///
/// let store = MyStore::default();
/// assert!(store.cas().is_some());
/// assert!(store.journal().is_none() && !store.shared());
/// ```
///
/// A store that wraps another one (to time or fault its calls) implements every capability
/// trait by forwarding, and returns `Some(self)` from an accessor only when the inner store
/// has the capability.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Whether several processes see the same data (Redis, Postgres), as opposed to one
    /// process's memory or file. The default is `false`.
    fn shared(&self) -> bool {
        false
    }

    /// Atomic compare-and-set of checkpoints, if the store has it. Without it, a coordinated
    /// bot warns at start and falls back to its local fence.
    fn cas(&self) -> Option<&dyn CasStore> {
        None
    }

    /// Fenced locks, if the store has them.
    fn locks(&self) -> Option<&dyn LockStore> {
        None
    }

    /// Leases, if the store has them.
    fn leases(&self) -> Option<&dyn LeaseStore> {
        None
    }

    /// Durable task records, if the store has them. Without them, the scheduler keeps a task's
    /// record in a checkpoint row of its own name.
    fn tasks(&self) -> Option<&dyn TaskStore> {
        None
    }

    /// The inbox journal and the outbox, if the store has them. Durability needs them.
    fn journal(&self) -> Option<&dyn JournalStore> {
        None
    }

    /// Inserts a chat or updates its `last_seen_ms` and `lang`, keeping `first_seen_ms`.
    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()>;

    /// Reads a chat.
    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>>;

    /// Reads the data kept for a user (a JSON document).
    async fn get_user_data(&self, key: &str) -> Result<Option<String>>;

    /// Replaces the data kept for a user.
    async fn set_user_data(&self, key: &str, data: &str) -> Result<()>;

    /// Reads the checkpoint of a conversation.
    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>>;

    /// Writes a checkpoint unconditionally and returns its revision.
    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64>;

    /// Deletes a checkpoint unconditionally.
    async fn clear_checkpoint(&self, key: &str) -> Result<()>;
}

/// Atomic compare-and-set of checkpoints, found through [`Store::cas`].
///
/// Under coordination, every checkpoint write of a turn is a compare-and-set over the revision
/// the writer last saw, so a replica that stalled past its turn cannot overwrite a newer row.
#[async_trait]
pub trait CasStore: Store {
    /// Writes a checkpoint only if the stored revision is `expected` (`None`: only if there is
    /// no checkpoint), as one atomic operation.
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome>;

    /// Deletes a checkpoint only if its revision is `expected`, as one atomic operation.
    /// Returns whether it deleted it; a newer row is left in place.
    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool>;
}

/// Fenced locks, found through [`Store::locks`].
#[async_trait]
pub trait LockStore: Store {
    /// Takes the lock `key` for `ttl` if nobody holds it.
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>>;

    /// Extends a held lock to `ttl` from now. Returns `false` when `token` no longer holds it.
    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool>;

    /// Releases a held lock. Returns `false` when `token` no longer held it.
    async fn release_lock(&self, key: &str, token: &str) -> Result<bool>;
}

/// Named leases, found through [`Store::leases`].
#[async_trait]
pub trait LeaseStore: Store {
    /// Takes the lease `name` for `holder` if it is free or already `holder`'s (which renews
    /// it). The fence grows when the holder changes.
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>>;

    /// Extends `holder`'s lease. Returns `false` when it no longer holds it.
    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool>;

    /// Gives up `holder`'s lease. Returns `false` when it no longer held it.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool>;
}

/// Durable task records, found through [`Store::tasks`].
#[async_trait]
pub trait TaskStore: Store {
    /// The last occurrence of durable task `id` claimed so far, if any. Task records are
    /// kept apart from checkpoints: no chat key can name one.
    async fn task_last(&self, id: &str) -> Result<Option<u64>>;

    /// Claims occurrence `occurrence` of durable task `id`, as one atomic operation: `true`
    /// when it is later than every occurrence claimed before (it is the last one now),
    /// `false` when it or a later one was claimed already. Of several replicas claiming the
    /// same occurrence, exactly one gets `true`.
    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool>;
}

/// The inbox journal and the outbox, found through [`Store::journal`].
#[async_trait]
pub trait JournalStore: Store {
    /// Where this journal is kept, for a coordinator that writes it in its own calls
    /// ([`TurnJournal`](crate::TurnJournal)): two handles with the same place read and write
    /// the same records. The default, for a journal no coordinator writes, is `None`.
    fn place(&self) -> Option<&str> {
        None
    }

    /// Journals an inbound message unless its id is already there. `retain` bounds how long
    /// the id is remembered for dedupe after it is acknowledged.
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend>;

    /// Marks a journaled message as handled.
    async fn inbox_ack(&self, id: &str) -> Result<()>;

    /// Marks several journaled messages as handled, as [`inbox_ack`](Self::inbox_ack) does
    /// each. The runtime acknowledges what many chats handled meanwhile with one call, so a
    /// store that can write them in one round trip should. On an error some may have landed;
    /// each is tried again, which an acknowledgement allows. The default acknowledges them
    /// one by one and stops at the first error.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        for id in ids {
            self.inbox_ack(id).await?;
        }
        Ok(())
    }

    /// Reads a journaled message, pending or acknowledged, while the journal remembers it.
    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>>;

    /// Lists pending messages, oldest first, at most `limit`.
    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>>;

    /// The pending records of chat `key`, oldest first, at most `limit`: what a new holder of
    /// the chat's turn takes over from the incarnations its grant passed over.
    ///
    /// The default reads [`inbox_pending`](JournalStore::inbox_pending) (at most 1,000
    /// records) and keeps the chat's; a store with a per-chat index answers it directly.
    async fn inbox_pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>> {
        const SCAN: usize = 1000;
        let mut records = self.inbox_pending(SCAN.max(limit)).await?;
        records.retain(|r| r.key == *key);
        records.truncate(limit);
        Ok(records)
    }

    /// Moves a pending message from `from` to `to`, if `from` still owns it.
    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool>;

    /// Marks the send `key` as made, for `ttl` from now: a step that runs again finds the mark
    /// (see [`outbox_marked`](Self::outbox_marked)) and does not send twice. Marking a key
    /// again keeps it marked, `ttl` from the later mark; so a mark whose reply was lost can be
    /// made again.
    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()>;

    /// Whether the send `key` was marked (by [`outbox_mark`](Self::outbox_mark)) and the mark
    /// has not expired. Only reads: asked again after a lost reply, it answers the same.
    async fn outbox_marked(&self, key: &str) -> Result<bool>;
}
