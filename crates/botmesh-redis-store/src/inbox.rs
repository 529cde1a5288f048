//! The journal's batches (see `crate::batch`): appends and acknowledgements of many chats,
//! one script call per batch in both layouts (the inbox's keys share one hash tag).

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
}

/// What every batch of one store shares.
pub(crate) struct Inbox {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) script: Script,
}

impl Batch for Inbox {
    type Op = Op;

    /// Appends and acknowledgements are idempotent: a batch is sent again after a drop. An
    /// append that landed the first time then reads as a pending duplicate of our own, which
    /// the runtime takes as its own.
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
            }
        }
        let invocation = &invocation;
        let reply =
            idempotent(|| async move { invocation.invoke_async(&mut self.conn.clone()).await })
                .await;
        batch::split(reply, ops.len())
    }
}
