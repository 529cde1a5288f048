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

/// One call of a batch.
#[derive(Debug)]
pub(super) enum Op {
    /// `count` tickets of `key`, for the call `tid`.
    Take { key: ChatKey, count: usize, tid: String },
    /// The turn of ticket `seq` of `key` given back, with the run of our tickets through
    /// `through` that held it after `seq` (`seq` itself outside a run).
    Release { key: ChatKey, seq: u64, through: u64, used: bool, keep_ms: u64, hand_back: bool },
}

impl Op {
    fn key(&self) -> &ChatKey {
        match self {
            Self::Take { key, .. } | Self::Release { key, .. } => key,
        }
    }
}

/// What every batch of one coordinator shares.
pub(super) struct Turns {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) script: Script,
    pub(super) incarnation: String,
    pub(super) replica_id: String,
    pub(super) lease_ms: u64,
}

impl Batch for Turns {
    type Op = Op;

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
        let bytes = ops.iter().map(|op| 3 * op.key().as_str().len() + 2 * shard.len() + 64).sum();
        let mut call = ScriptCall::new(&self.script, 2 * ops.len(), 5 + 9 * ops.len(), bytes);
        for op in ops {
            let (state, queue) = Keys::turn_args(shard, op.key().as_str());
            call.arg(state).arg(queue);
        }
        call.arg(&self.incarnation).arg(&self.replica_id).arg(&alive).arg(self.lease_ms).arg(&wake);
        for op in ops {
            match op {
                Op::Take { key, count, tid } => {
                    call.arg("t").arg(key.as_str()).arg(*count).arg(tid);
                }
                Op::Release { key, seq, through, used, keep_ms, hand_back } => {
                    call.arg("r")
                        .arg(key.as_str())
                        .arg(*seq)
                        .arg(*through)
                        .arg(if *used { "1" } else { "0" })
                        .arg(*keep_ms)
                        .arg(if *hand_back { "1" } else { "0" });
                }
            }
        }
        batch::split(call.invoke(&mut self.conn.clone()).await, ops.len())
    }
}
