//! The coordinator's batches (see `crate::batch`): tickets and releases of many chats, one
//! script call per batch, per shard in the cluster layout (whose scripts cannot cross slots).

use botmesh_traits::ChatKey;
use futures_util::future::join_all;
use redis::Script;

use crate::KeyLayout;
use crate::batch::{self, Batch, Reply};
use crate::call::ScriptCall;
use crate::conn::Conn;
use crate::keys::Keys;
use crate::parts::Parts;
use crate::{Replicas, replicas};

/// One call of a batch.
#[derive(Debug)]
pub(super) enum Op {
    /// `count` tickets of `key`, for the call `tid`.
    Take { key: ChatKey, count: usize, tid: String },
    /// Messages of `key` journaled in order (`records`: each one's id and payload, owned by
    /// `owner`, kept `retain_ms` once acknowledged), with a ticket for each one journaled now,
    /// for the call `tid`. Only in the standalone layout, where the journal shares the server.
    Journal { key: ChatKey, tid: String, owner: String, retain_ms: u64, records: Vec<Parts<2>> },
    /// The turn of ticket `seq` of `key` given back, with the run of our tickets through
    /// `through` that held it after `seq` (`seq` itself outside a run); with journaled
    /// message `ack` acknowledged, if any (standalone layout only).
    Release {
        key: ChatKey,
        seq: u64,
        through: u64,
        used: bool,
        keep_ms: u64,
        hand_back: bool,
        ack: Option<String>,
    },
}

impl Op {
    fn key(&self) -> &ChatKey {
        match self {
            Self::Take { key, .. } | Self::Journal { key, .. } | Self::Release { key, .. } => key,
        }
    }

    /// The Redis keys the call touches beyond its chat's two, and its arguments' bytes.
    fn size(&self, journal: Option<&JournalKeys>) -> (usize, usize) {
        let base = journal.map_or(0, |j| j.base.len() + j.pending.len() + j.seq.len());
        match self {
            Self::Take { tid, .. } => (0, tid.len() + 16),
            Self::Journal { tid, owner, records, .. } => {
                let records: usize = records.iter().map(|r| r.get()[0].len() + r.bytes() + 8).sum();
                (2 + self.records(), tid.len() + owner.len() + records + base + 32)
            }
            Self::Release { ack, .. } => {
                ack.as_ref().map_or((0, 48), |id| (2, 2 * id.len() + base + 48))
            }
        }
    }

    fn records(&self) -> usize {
        match self {
            Self::Journal { records, .. } => records.len(),
            Self::Take { .. } | Self::Release { .. } => 0,
        }
    }
}

/// The store's journal keys, for a coordinator that writes the journal (standalone layout).
#[derive(Debug, Clone)]
pub(super) struct JournalKeys {
    /// What a record's key starts with.
    pub(super) base: String,
    /// The pending index.
    pub(super) pending: String,
    /// The journal's sequence.
    pub(super) seq: String,
}

impl JournalKeys {
    pub(super) fn new(keys: &Keys) -> Self {
        Self { base: keys.inbox_base(), pending: keys.inbox("pending"), seq: keys.inbox("seq") }
    }
}

/// What every batch of one coordinator shares.
pub(super) struct Turns {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) script: &'static Script,
    pub(super) incarnation: String,
    pub(super) replica_id: String,
    pub(super) lease_ms: u64,
    /// The store's journal, when this coordinator writes it.
    pub(super) journal: Option<JournalKeys>,
    /// The replicas a batch waits for: its takes grant turns, its releases hand them on.
    pub(super) replicas: Option<Replicas>,
}

impl Batch for Turns {
    type Op = Op;

    /// A journaling take's script writes each of its records: it weighs one per record more.
    fn weight(op: &Op) -> usize {
        1 + op.records()
    }

    /// A release goes ahead of the takes queued before it: the chat's next message, here or
    /// on another replica, waits for it, while a take under a burst starts a message that
    /// waits behind others anyway.
    fn urgent(op: &Op) -> bool {
        matches!(op, Op::Release { .. })
    }

    async fn send(&self, ops: Vec<Op>) -> Vec<Reply> {
        if self.keys.layout() == KeyLayout::Standalone {
            // One shard: every chat's keys share the prefix.
            return self.send_shard(&self.keys.shard(""), &ops).await;
        }
        // By shard, keeping each call's place to answer it in order.
        let mut shards: Vec<(String, Vec<(usize, Op)>)> = Vec::new();
        let count = ops.len();
        for (i, op) in ops.into_iter().enumerate() {
            let shard = self.keys.shard(op.key().as_str());
            match shards.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, ops)) => ops.push((i, op)),
                None => shards.push((shard, vec![(i, op)])),
            }
        }
        let sent = join_all(shards.into_iter().map(|(shard, ops)| async move {
            let (places, ops): (Vec<usize>, Vec<Op>) = ops.into_iter().unzip();
            let replies = self.send_shard(&shard, &ops).await;
            places.into_iter().zip(replies)
        }))
        .await;
        let mut replies: Vec<Option<Reply>> = (0..count).map(|_| None).collect();
        for (place, reply) in sent.into_iter().flatten() {
            if let Some(slot) = replies.get_mut(place) {
                *slot = Some(reply);
            }
        }
        replies.into_iter().flatten().collect()
    }
}

impl Turns {
    /// One script call for the calls of one shard (tag `shard`).
    async fn send_shard(&self, shard: &str, ops: &[Op]) -> Vec<Reply> {
        let alive = Keys::alive_prefix(shard);
        let wake = self.keys.wake_prefix();
        let journal = self.journal.as_ref();
        let (mut keys, mut bytes, mut records) = (2 * ops.len(), 0, 0);
        for op in ops {
            let (more, size) = op.size(journal);
            keys += more;
            bytes += size + 3 * op.key().as_str().len() + 2 * shard.len();
            records += op.records();
        }
        let mut call = ScriptCall::new(self.script, keys, 6 + 10 * ops.len() + 2 * records, bytes);
        for op in ops {
            let (state, queue) = Keys::turn_args(shard, op.key().as_str());
            call.arg(state).arg(queue);
            match (op, journal) {
                (Op::Journal { records, .. }, Some(j)) => {
                    call.arg(&j.pending).arg(&j.seq);
                    for record in records {
                        let [id, _] = record.get();
                        call.arg(Keys::record_arg(&j.base, id));
                    }
                }
                (Op::Release { ack: Some(id), .. }, Some(j)) => {
                    call.arg(&j.pending).arg(Keys::record_arg(&j.base, id));
                }
                _ => {}
            }
        }
        call.arg(&self.incarnation).arg(&self.replica_id).arg(&alive).arg(self.lease_ms).arg(&wake);
        call.arg(records);
        for op in ops {
            match op {
                Op::Take { key, count, tid } => {
                    call.arg("t").arg(key.as_str()).arg(*count).arg(tid);
                }
                Op::Journal { key, tid, owner, retain_ms, records } => {
                    call.arg("j").arg(key.as_str()).arg(records.len()).arg(tid);
                    call.arg(owner).arg(*retain_ms);
                    for record in records {
                        let [id, payload] = record.get();
                        call.arg(id).arg(payload);
                    }
                }
                Op::Release { key, seq, through, used, keep_ms, hand_back, ack } => {
                    call.arg("r")
                        .arg(key.as_str())
                        .arg(*seq)
                        .arg(*through)
                        .arg(if *used { "1" } else { "0" })
                        .arg(*keep_ms)
                        .arg(if *hand_back { "1" } else { "0" })
                        // Written only with the journal's keys (see above).
                        .arg(ack.as_deref().filter(|_| journal.is_some()).unwrap_or(""));
                }
            }
        }
        batch::split(
            replicas::script(&call, &mut self.conn.clone(), self.replicas).await,
            ops.len(),
        )
    }
}
