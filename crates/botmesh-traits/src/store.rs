//! The state side: chats, user data, flow checkpoints, locks, leases, the inbox journal and
//! the outbox.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{ChatId, ChatKey, Error, Result};

/// What a store can do beyond the required methods.
///
/// The runtime reads this at start instead of guessing: a store without atomic checkpoint
/// writes makes a coordinated bot warn and fall back to its local fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCapabilities {
    atomic_checkpoints: bool,
    fenced_locks: bool,
    leases: bool,
    journal: bool,
    tasks: bool,
    shared: bool,
}

impl StoreCapabilities {
    /// A store local to one process with none of the optional operations.
    pub const fn local() -> Self {
        Self {
            atomic_checkpoints: false,
            fenced_locks: false,
            leases: false,
            journal: false,
            tasks: false,
            shared: false,
        }
    }

    /// Every optional operation, in a store that the replicas of a bot share.
    pub const fn full_shared() -> Self {
        Self {
            atomic_checkpoints: true,
            fenced_locks: true,
            leases: true,
            journal: true,
            tasks: true,
            shared: true,
        }
    }

    /// Declares [`Store::set_checkpoint_if`] and [`Store::clear_checkpoint_if`].
    pub const fn with_atomic_checkpoints(mut self, yes: bool) -> Self {
        self.atomic_checkpoints = yes;
        self
    }

    /// Declares [`Store::acquire_lock_fenced`], [`Store::renew_lock`] and
    /// [`Store::release_lock`].
    pub const fn with_fenced_locks(mut self, yes: bool) -> Self {
        self.fenced_locks = yes;
        self
    }

    /// Declares [`Store::acquire_lease`], [`Store::renew_lease`] and [`Store::release_lease`].
    pub const fn with_leases(mut self, yes: bool) -> Self {
        self.leases = yes;
        self
    }

    /// Declares durable task records ([`Store::task_last`], [`Store::task_claim`]). Without
    /// them, the scheduler keeps a task's record in a checkpoint row of its own name.
    pub const fn with_tasks(mut self, yes: bool) -> Self {
        self.tasks = yes;
        self
    }

    /// Declares the inbox journal and the outbox.
    pub const fn with_journal(mut self, yes: bool) -> Self {
        self.journal = yes;
        self
    }

    /// Declares that several processes see the same data (Redis, Postgres), as opposed to
    /// one process's memory or file.
    pub const fn with_shared(mut self, yes: bool) -> Self {
        self.shared = yes;
        self
    }

    /// Whether checkpoint compare-and-set is one atomic operation.
    pub const fn atomic_checkpoints(&self) -> bool {
        self.atomic_checkpoints
    }

    /// Whether fenced locks are implemented.
    pub const fn fenced_locks(&self) -> bool {
        self.fenced_locks
    }

    /// Whether leases are implemented.
    pub const fn leases(&self) -> bool {
        self.leases
    }

    /// Whether durable task records are implemented.
    pub const fn tasks(&self) -> bool {
        self.tasks
    }

    /// Whether the inbox journal and the outbox are implemented.
    pub const fn journal(&self) -> bool {
        self.journal
    }

    /// Whether several processes share the data.
    pub const fn shared(&self) -> bool {
        self.shared
    }
}

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

/// A lock acquired with [`Store::acquire_lock_fenced`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedLock {
    /// Proves ownership to [`Store::renew_lock`] and [`Store::release_lock`].
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

/// A lease granted by [`Store::acquire_lease`].
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

/// The result of [`Store::inbox_append`].
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

fn unsupported<T>(op: &'static str) -> Result<T> {
    Err(Error::Unsupported { op })
}

/// Where a bot keeps its state.
///
/// The required methods cover what a single-process bot needs: chats, per-user data and flow
/// checkpoints. Everything replicas need (compare-and-set, fenced locks, leases, the inbox
/// journal, the outbox) has a default body returning [`Error::Unsupported`]; a store that
/// implements them says so in [`Store::capabilities`].
///
/// Keys are opaque strings built by the runtime. Times to live are honoured by the store; an
/// expired entry behaves exactly as a missing one.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What the store implements beyond the required methods.
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::local()
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

    /// Writes a checkpoint only if the stored revision is `expected` (`None`: only if there is
    /// no checkpoint), as one atomic operation.
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let _ = (key, write, expected);
        unsupported("set_checkpoint_if")
    }

    /// Deletes a checkpoint only if its revision is `expected`, as one atomic operation.
    /// Returns whether it deleted it; a newer row is left in place.
    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let _ = (key, expected);
        unsupported("clear_checkpoint_if")
    }

    /// Takes the lock `key` for `ttl` if nobody holds it.
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let _ = (key, ttl);
        unsupported("acquire_lock_fenced")
    }

    /// Extends a held lock to `ttl` from now. Returns `false` when `token` no longer holds it.
    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let _ = (key, token, ttl);
        unsupported("renew_lock")
    }

    /// Releases a held lock. Returns `false` when `token` no longer held it.
    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        let _ = (key, token);
        unsupported("release_lock")
    }

    /// Takes the lease `name` for `holder` if it is free or already `holder`'s (which renews
    /// it). The fence grows when the holder changes.
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let _ = (name, holder, ttl);
        unsupported("acquire_lease")
    }

    /// Extends `holder`'s lease. Returns `false` when it no longer holds it.
    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let _ = (name, holder, ttl);
        unsupported("renew_lease")
    }

    /// Gives up `holder`'s lease. Returns `false` when it no longer held it.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let _ = (name, holder);
        unsupported("release_lease")
    }

    /// The last occurrence of durable task `id` claimed so far, if any. Task records are
    /// kept apart from checkpoints: no chat key can name one.
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        let _ = id;
        unsupported("task_last")
    }

    /// Claims occurrence `occurrence` of durable task `id`, as one atomic operation: `true`
    /// when it is later than every occurrence claimed before (it is the last one now),
    /// `false` when it or a later one was claimed already. Of several replicas claiming the
    /// same occurrence, exactly one gets `true`.
    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        let _ = (id, occurrence);
        unsupported("task_claim")
    }

    /// Journals an inbound message unless its id is already there. `retain` bounds how long
    /// the id is remembered for dedupe after it is acknowledged.
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        let _ = (record, retain);
        unsupported("inbox_append")
    }

    /// Marks a journaled message as handled.
    async fn inbox_ack(&self, id: &str) -> Result<()> {
        let _ = id;
        unsupported("inbox_ack")
    }

    /// Reads a journaled message, pending or acknowledged, while the journal remembers it.
    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let _ = id;
        unsupported("inbox_get")
    }

    /// Lists pending messages, oldest first, at most `limit`.
    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        let _ = limit;
        unsupported("inbox_pending")
    }

    /// The pending records of chat `key`, oldest first, at most `limit`: what a new holder of
    /// the chat's turn takes over from the incarnations its grant passed over.
    ///
    /// The default reads [`inbox_pending`](Store::inbox_pending) (at most 1,000 records) and
    /// keeps the chat's; a store with a per-chat index answers it directly.
    async fn inbox_pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>> {
        const SCAN: usize = 1000;
        let mut records = self.inbox_pending(SCAN.max(limit)).await?;
        records.retain(|r| r.key == *key);
        records.truncate(limit);
        Ok(records)
    }

    /// Moves a pending message from `from` to `to`, if `from` still owns it.
    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let _ = (id, from, to);
        unsupported("inbox_claim")
    }

    /// Records that the send `key` happened; returns `false` if it was already recorded within
    /// `ttl`, so a step that runs again does not send twice.
    async fn outbox_claim(&self, key: &str, ttl: Duration) -> Result<bool> {
        let _ = (key, ttl);
        unsupported("outbox_claim")
    }

    /// Forgets the send `key`: it was claimed, but the provider did not take it, so the next
    /// run of the same step must make it. Forgetting a key that is not there is not an error.
    async fn outbox_release(&self, key: &str) -> Result<()> {
        let _ = key;
        unsupported("outbox_release")
    }
}
