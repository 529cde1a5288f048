//! The journal's batches (see `crate::batch`): appends, acknowledgements and outbox claims of
//! many chats, one script call per batch in both layouts (their keys share one hash tag).

use redis::Script;

use crate::batch::{self, Batch, Reply};
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
        let (pending, seq) = (self.keys.inbox("pending"), self.keys.inbox("seq"));
        let mut invocation = self.script.prepare_invoke();
        invocation.key(&pending).key(&seq);
        for op in &ops {
            match op {
                Op::Append { id, key, payload, owner, state, retain_ms } => {
                    invocation.key(self.keys.inbox(&format!("r:{id}")));
                    invocation
                        .arg("a")
                        .arg(id)
                        .arg(key)
                        .arg(payload)
                        .arg(owner)
                        .arg(*state)
                        .arg(*retain_ms);
                }
                Op::Ack { id } => {
                    invocation.key(self.keys.inbox(&format!("r:{id}")));
                    invocation.arg("k").arg(id);
                }
                Op::Claim { key, token, ttl_ms } => {
                    invocation.key(self.keys.outbox(key));
                    invocation.arg("o").arg(token).arg(*ttl_ms);
                }
            }
        }
        let invocation = &invocation;
        let reply =
            idempotent(|| async move { invocation.invoke_async(&mut self.conn.clone()).await })
                .await;
        batch::split(reply, ops.len())
    }
}
