//! The Lua scripts: every read-then-write on Redis is one of these, so it runs atomically on
//! the server. Each lives in its own file under `scripts/`, compiled in with `include_str!`;
//! the constants below say what each takes and returns.
//!
//! Numbers that must never repeat for a key (ticket numbers, fences, checkpoint revisions)
//! start from the server's clock in microseconds when the key is created, then grow by one.
//! A key that expired or was deleted therefore restarts above every value it ever handed out.
//! They travel as decimal strings: Lua numbers are doubles and print large integers in
//! exponent form.

use std::sync::OnceLock;

use redis::Script;

/// Helpers shared by the scripts.
const PRELUDE: &str = include_str!("../scripts/prelude.lua");

/// One script: its body, and the script itself (the body after the prelude, and its SHA-1),
/// made on first use and shared by every store and coordinator of the process, so that the
/// text is joined and hashed once, not once per connection or batcher.
pub(crate) struct Lua {
    body: &'static str,
    script: OnceLock<Script>,
}

impl Lua {
    const fn new(body: &'static str) -> Self {
        Self { body, script: OnceLock::new() }
    }

    /// The script, called by its hash.
    pub(crate) fn get(&self) -> &Script {
        self.script.get_or_init(|| Script::new(&with_prelude(self.body)))
    }

    /// The script's text, to load it.
    fn text(&self) -> String {
        with_prelude(self.body)
    }
}

/// The coordinator's batch: takes (journaling or not) and releases of many chats, in order,
/// one reply each. The script's header lists its keys, arguments and replies;
/// `coordinator/batch.rs` writes the call, and `coordinator/mod.rs` reads the replies.
pub(crate) static TURNS: Lua = Lua::new(include_str!("../scripts/turns.lua"));

/// KEYS: state, queue. ARGV: incarnation, alive prefix, seq, wake prefix, chat key.
/// Returns `{'granted', fence, prev, passed over}`, `{'gone'}`, or `{'wait'}` followed by a
/// grant made to another ticket of this incarnation (`seq, fence, prev, passed over`, or four
/// '') and the incarnation holding the turn ('' for none).
pub(crate) static TRY_TURN: Lua = Lua::new(include_str!("../scripts/try_turn.lua"));

/// KEYS: state, queue. ARGV: incarnation, seq, keep ms, wake prefix, chat key, alive prefix.
/// Withdraws a ticket (or gives its turn back unused), naming this incarnation in the next
/// grant. Returns like a release in [`TURNS`].
pub(crate) static CANCEL: Lua = Lua::new(include_str!("../scripts/cancel.lua"));

/// KEYS: state, queue. ARGV: incarnation, tid, keep ms, wake prefix, chat key, alive prefix.
/// Withdraws the ticket a `take_ticket` call with this tid made, when its reply was lost: the
/// queued ticket, or the turn it was granted (given back unused).
pub(crate) static ABANDON: Lua = Lua::new(include_str!("../scripts/abandon.lua"));

/// KEYS: leadership. ARGV: incarnation, replica, alive prefix, lease ms.
/// Returns the fence, or false when a live other incarnation leads.
pub(crate) static TRY_LEAD: Lua = Lua::new(include_str!("../scripts/try_lead.lua"));

/// KEYS: leadership. ARGV: incarnation, fence. Returns 1 when it resigned.
pub(crate) static RESIGN: Lua = Lua::new(include_str!("../scripts/resign.lua"));

/// KEYS: index, document. ARGV: incarnation, replica, status, keep ms. Replaces the
/// incarnation's status document (a hash: `r` replica, `s` status, `t` published at, server
/// ms), kept `keep` ms; indexes it scored by the end of its keep, and trims the index of the
/// entries whose keep ended. The index expires with its longest keep.
pub(crate) static PUBLISH_STATUS: Lua = Lua::new(include_str!("../scripts/publish_status.lua"));

/// KEYS: leadership hashes, then the index when a document prefix is given. ARGV: alive prefix
/// or '' (liveness is then not read), document prefix or '' (no index). Read-only. Returns
/// `{replicas, leaders}`, flat: per kept document `incarnation, replica, status, age ms,
/// alive`, per held leadership `position of its key (from 1), incarnation, replica, fence,
/// alive`; alive is '1', '0', or '' when not read.
pub(crate) static CLUSTER: Lua = Lua::new(include_str!("../scripts/cluster.lua"));

/// KEYS: chat. ARGV: provider, now ms, lang or ''.
pub(crate) static UPSERT_CHAT: Lua = Lua::new(include_str!("../scripts/upsert_chat.lua"));

/// KEYS: checkpoint. ARGV: mode ('any' | 'absent' | 'rev'), expected, data, ttl ms or '',
/// keep ms. Returns `{1, revision}` or `{0, current revision or ''}`.
pub(crate) static SET_CHECKPOINT: Lua = Lua::new(include_str!("../scripts/set_checkpoint.lua"));

/// KEYS: checkpoint. ARGV: expected revision or '' for any, keep ms. Returns 1 when deleted.
pub(crate) static CLEAR_CHECKPOINT: Lua = Lua::new(include_str!("../scripts/clear_checkpoint.lua"));

/// KEYS: task. ARGV: occurrence. Returns 1 when the occurrence is later than the last one
/// claimed, which it becomes; 0 otherwise.
pub(crate) static TASK_CLAIM: Lua = Lua::new(include_str!("../scripts/task_claim.lua"));

/// KEYS: lock. ARGV: token, ttl ms. Returns the fence, or false when held.
pub(crate) static ACQUIRE_LOCK: Lua = Lua::new(include_str!("../scripts/acquire_lock.lua"));

/// KEYS: lock. ARGV: token, ttl ms. Returns 1 when renewed.
pub(crate) static RENEW_LOCK: Lua = Lua::new(include_str!("../scripts/renew_lock.lua"));

/// KEYS: lock. ARGV: token, keep ms. Returns 1 when released.
pub(crate) static RELEASE_LOCK: Lua = Lua::new(include_str!("../scripts/release_lock.lua"));

/// KEYS: lease. ARGV: holder, ttl ms. Returns the fence, or false when another holds it.
pub(crate) static ACQUIRE_LEASE: Lua = Lua::new(include_str!("../scripts/acquire_lease.lua"));

/// KEYS: lease. ARGV: holder, ttl ms. Returns 1 when renewed.
pub(crate) static RENEW_LEASE: Lua = Lua::new(include_str!("../scripts/renew_lease.lua"));

/// KEYS: lease. ARGV: holder, keep ms. Returns 1 when released.
pub(crate) static RELEASE_LEASE: Lua = Lua::new(include_str!("../scripts/release_lease.lua"));

/// KEYS: pending index, sequence, then one record per call. ARGV per call: `'a', id, key,
/// payload, owner, state, retain ms` (an append), `'k', id` (an acknowledgement) or `'o', ttl
/// ms` (an outbox mark). Runs the calls in order and returns, per call, its reply's length
/// (1), then the reply: an append's 'new' or the existing record's state; an
/// acknowledgement's 1, or 0 when the record is gone; a mark's 1.
pub(crate) static INBOX_BATCH: Lua = Lua::new(include_str!("../scripts/inbox_batch.lua"));

/// KEYS: record. ARGV: from, to. Returns 1 when claimed.
pub(crate) static INBOX_CLAIM: Lua = Lua::new(include_str!("../scripts/inbox_claim.lua"));

/// KEYS: pending index. ARGV: limit, record key prefix.
/// Returns a flat list of id, key, payload, owner for each pending record, oldest first.
pub(crate) static INBOX_PENDING: Lua = Lua::new(include_str!("../scripts/inbox_pending.lua"));

/// Prepends the shared helpers to a script body.
fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}

/// The coordinator's scripts.
pub(crate) static COORDINATION: [&Lua; 8] =
    [&TURNS, &TRY_TURN, &CANCEL, &ABANDON, &TRY_LEAD, &RESIGN, &PUBLISH_STATUS, &CLUSTER];

/// The store's scripts.
pub(crate) static STORE: [&Lua; 13] = [
    &UPSERT_CHAT,
    &SET_CHECKPOINT,
    &CLEAR_CHECKPOINT,
    &TASK_CLAIM,
    &ACQUIRE_LOCK,
    &RENEW_LOCK,
    &RELEASE_LOCK,
    &ACQUIRE_LEASE,
    &RENEW_LEASE,
    &RELEASE_LEASE,
    &INBOX_BATCH,
    &INBOX_CLAIM,
    &INBOX_PENDING,
];

/// Loads `scripts` into the server's script cache at connect, in one round
/// trip on a single server (one command per script, each to every primary, in a cluster), so
/// that a burst on a fresh server runs them by hash at once instead of each caller loading
/// them again. A script the server lost later (a restart) is loaded again by its first call.
/// A failure here is only logged: calls load what they miss.
pub(crate) async fn preload(conn: &crate::conn::Conn, scripts: &[&Lua]) {
    use crate::conn::Conn;
    let mut conn = conn.clone();
    let loaded: redis::RedisResult<()> = match &mut conn {
        Conn::Single(_) | Conn::Sentinel(_) => {
            let mut pipe = redis::pipe();
            for lua in scripts {
                // Made now, at connect, so that no message pays for the hash.
                let _ = lua.get();
                pipe.cmd("SCRIPT").arg("LOAD").arg(lua.text()).ignore();
            }
            pipe.query_async(&mut conn).await
        }
        Conn::Cluster(cluster) => {
            let mut result = Ok(());
            for lua in scripts {
                let _ = lua.get();
                let load = redis::cmd("SCRIPT").arg("LOAD").arg(lua.text()).clone();
                if let Err(e) = load.query_async::<redis::Value>(cluster).await {
                    result = Err(e);
                }
            }
            result
        }
    };
    if let Err(e) = loaded {
        tracing::debug!(target: "botmesh", error = %e, "scripts not preloaded; calls load them");
    }
}
