//! The journal's batches (see `crate::batch`): appends, acknowledgements and outbox claims of
//! many chats, one script call per batch in both layouts (their keys share one hash tag).

use redis::Script;

use crate::batch::{self, Batch, Reply};
use crate::call::ScriptCall;
use crate::conn::{Conn, idempotent};
use crate::keys::Keys;

/// One call of a batch.
#[derive(Debug)]
pub(crate) enum Op {
    /// Journals a record, unless one with its id exists.
    Append {
        id: String,
        key: String,
        payload: String,
        owner: String,
        state: &'static str,
        retain_ms: u64,
    },
    /// Marks a record handled.
    Ack { id: String },
    /// Claims outbox entry `key` for `token`, kept `ttl_ms`.
    Claim { key: String, token: String, ttl_ms: u64 },
}

/// What every batch of one store shares.
pub(crate) struct Inbox {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) script: Script,
}

impl Batch for Inbox {
    type Op = Op;

    /// Every call is idempotent, so a batch is sent again after a drop: an append that landed
    /// the first time reads as a pending duplicate of our own, which the runtime takes as its
    /// own; a claim that landed finds its own token.
    async fn send(&self, ops: Vec<Op>) -> Vec<Reply> {
        let base = self.keys.inbox_base();
        let (pending, seq) = (self.keys.inbox("pending"), self.keys.inbox("seq"));
        let bytes = ops
            .iter()
            .map(|op| match op {
                Op::Append { id, key, payload, owner, .. } => {
                    2 * id.len() + key.len() + payload.len() + owner.len() + 64
                }
                Op::Ack { id } => 2 * id.len() + 8,
                Op::Claim { key, token, .. } => key.len() + token.len() + 32,
            })
            .sum::<usize>()
            + ops.len() * base.len();
        let appends = ops.iter().filter(|op| matches!(op, Op::Append { .. })).count();
        let mut call = ScriptCall::new(&self.script, 2 + ops.len(), 3 + 8 * ops.len(), bytes + 8);
        call.arg(&pending).arg(&seq);
        for op in &ops {
            match op {
                Op::Append { id, .. } | Op::Ack { id } => call.arg(Keys::record_arg(&base, id)),
                Op::Claim { key, .. } => call.arg(Keys::outbox_arg(&base, key)),
            };
        }
        call.arg(appends);
        for op in &ops {
            match op {
                Op::Append { id, key, payload, owner, state, retain_ms } => {
                    call.arg("a")
                        .arg(id)
                        .arg(key)
                        .arg(payload)
                        .arg(owner)
                        .arg(*state)
                        .arg(*retain_ms);
                }
                Op::Ack { id } => {
                    call.arg("k").arg(id);
                }
                Op::Claim { token, ttl_ms, .. } => {
                    call.arg("o").arg(token).arg(*ttl_ms);
                }
            }
        }
        let call = &call;
        let reply = idempotent(|| async move { call.invoke(&mut self.conn.clone()).await }).await;
        batch::split(reply, ops.len())
    }
}
