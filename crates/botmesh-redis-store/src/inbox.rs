//! The journal's batches (see `crate::batch`): appends, acknowledgements and outbox marks of
//! many chats, one script call per batch in both layouts (their keys share one hash tag).

use redis::Script;

use crate::batch::{self, Batch, Reply};
use crate::call::ScriptCall;
use crate::conn::{Conn, idempotent};
use crate::keys::Keys;
use crate::parts::Parts;
use crate::{Replicas, replicas};

/// One call of a batch.
#[derive(Debug)]
pub(crate) enum Op {
    /// Journals a record, unless one with its id exists.
    Append(Append),
    /// Marks a record handled.
    Ack { id: String },
    /// Marks outbox entry `key` (a send made), kept `ttl_ms`.
    Mark { key: String, ttl_ms: u64 },
}

/// A record to journal: its id, chat key, payload and owner (see [`Parts`]), with the
/// record's state and retention.
#[derive(Debug)]
pub(crate) struct Append {
    fields: Parts<4>,
    pub(crate) state: &'static str,
    pub(crate) retain_ms: u64,
}

impl Append {
    /// A record `id` of chat `key` with `payload`, owned by `owner`.
    pub(crate) fn new(fields: [&str; 4], state: &'static str, retain_ms: u64) -> Self {
        Self { fields: Parts::new(fields), state, retain_ms }
    }

    /// The id, the chat key, the payload and the owner.
    pub(crate) fn fields(&self) -> [&str; 4] {
        self.fields.get()
    }
}

/// What every batch of one store shares.
pub(crate) struct Inbox {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) script: &'static Script,
    /// The replicas every batch waits for: an append or an acknowledgement counts only once
    /// they have it.
    pub(crate) replicas: Option<Replicas>,
}

impl Batch for Inbox {
    type Op = Op;

    /// Every call is idempotent, so a batch is sent again after a drop: an append that landed
    /// the first time reads as a pending duplicate of our own, which the runtime takes as its
    /// own; a mark made twice is one mark.
    async fn send(&self, ops: Vec<Op>) -> Vec<Reply> {
        let base = self.keys.inbox_base();
        let (pending, seq) = (self.keys.inbox("pending"), self.keys.inbox("seq"));
        let bytes = ops
            .iter()
            .map(|op| match op {
                Op::Append(a) => a.fields.bytes() + a.fields()[0].len() + 64,
                Op::Ack { id } => 2 * id.len() + 8,
                Op::Mark { key, .. } => key.len() + 24,
            })
            .sum::<usize>()
            + ops.len() * base.len();
        let appends = ops.iter().filter(|op| matches!(op, Op::Append(_))).count();
        let mut call = ScriptCall::new(self.script, 2 + ops.len(), 3 + 8 * ops.len(), bytes + 8);
        call.arg(&pending).arg(&seq);
        for op in &ops {
            match op {
                Op::Append(a) => call.arg(Keys::record_arg(&base, a.fields()[0])),
                Op::Ack { id } => call.arg(Keys::record_arg(&base, id)),
                Op::Mark { key, .. } => call.arg(Keys::outbox_arg(&base, key)),
            };
        }
        call.arg(appends);
        for op in &ops {
            match op {
                Op::Append(a) => {
                    let [id, key, payload, owner] = a.fields();
                    call.arg("a")
                        .arg(id)
                        .arg(key)
                        .arg(payload)
                        .arg(owner)
                        .arg(a.state)
                        .arg(a.retain_ms);
                }
                Op::Ack { id } => {
                    call.arg("k").arg(id);
                }
                Op::Mark { ttl_ms, .. } => {
                    call.arg("o").arg(*ttl_ms);
                }
            }
        }
        let call = &call;
        let reply = idempotent(|| async move {
            replicas::script(call, &mut self.conn.clone(), self.replicas).await
        })
        .await;
        batch::split(reply, ops.len())
    }
}

#[cfg(test)]
mod tests {
    use super::Append;

    #[test]
    fn a_record_s_fields_come_back_apart_from_their_one_string() {
        let fields = ["tg:7", "telegram:ünï", "{\"text\":\"héllo\"}", ""];
        let append = Append::new(fields, "pending", 60_000);
        assert_eq!(append.fields(), fields);
        let empty = Append::new(["", "", "", "owner"], "acked", 1);
        assert_eq!(empty.fields(), ["", "", "", "owner"]);
    }
}
