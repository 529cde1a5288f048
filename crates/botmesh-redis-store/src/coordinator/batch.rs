//! Batching across chats: the tickets and releases a replica asks for while earlier calls are
//! on the wire go to Redis together, one script call per batch (per shard in the cluster
//! layout, whose scripts cannot cross slots). An idle replica's call goes out at once, alone;
//! under load, calls queue while [`IN_FLIGHT`] batches are out, and leave together.

use std::sync::Arc;

use botmesh_traits::ChatKey;
use redis::Script;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::conn::Conn;
use crate::keys::Keys;

/// Batches on the wire at once; the next waits, gathering calls, until one returns.
const IN_FLIGHT: usize = 2;

/// The most calls in one batch.
const MAX_BATCH: usize = 256;

/// One call of a batch.
#[derive(Debug)]
pub(super) enum Op {
    /// `count` tickets of `key`, for the call `tid`.
    Take { key: ChatKey, count: usize, tid: String },
    /// The turn of ticket `seq` of `key` given back.
    Release { key: ChatKey, seq: u64, used: bool, keep_ms: u64, hand_back: bool },
}

impl Op {
    fn key(&self) -> &ChatKey {
        match self {
            Self::Take { key, .. } | Self::Release { key, .. } => key,
        }
    }
}

/// What a call gets back: its part of the batch's reply, or the batch's error.
pub(super) type Reply = Result<Vec<String>, Arc<redis::RedisError>>;

struct Call {
    op: Op,
    reply: oneshot::Sender<Reply>,
}

/// What every batch of one coordinator shares.
pub(super) struct Context {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) script: Script,
    pub(super) incarnation: String,
    pub(super) replica_id: String,
    pub(super) lease_ms: u64,
}

/// The handle calls are made through; the batching task ends when it is dropped.
pub(super) struct Batcher {
    calls: mpsc::UnboundedSender<Call>,
}

impl Batcher {
    /// Starts the batching task.
    pub(super) fn spawn(context: Context) -> (Self, JoinHandle<()>) {
        let (calls, rx) = mpsc::unbounded_channel();
        (Self { calls }, tokio::spawn(drive(rx, Arc::new(context))))
    }

    /// Runs `op` in the next batch and returns its reply.
    pub(super) async fn call(&self, op: Op) -> Reply {
        let (reply, answer) = oneshot::channel();
        let closed =
            || Arc::new(redis::RedisError::from(std::io::Error::other("coordinator dropped")));
        self.calls.send(Call { op, reply }).map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

/// Gathers calls into batches, at most [`IN_FLIGHT`] on the wire at once.
async fn drive(mut rx: mpsc::UnboundedReceiver<Call>, context: Arc<Context>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = Vec::new();
    loop {
        // A slot first: while none is free, calls gather in the channel.
        let Ok(slot) = Arc::clone(&in_flight).acquire_owned().await else { return };
        if rx.recv_many(&mut calls, MAX_BATCH).await == 0 {
            return;
        }
        let batch = std::mem::take(&mut calls);
        let context = Arc::clone(&context);
        tokio::spawn(async move {
            run(&context, batch).await;
            drop(slot);
        });
    }
}

/// Sends one batch: one script call per shard, concurrently.
async fn run(context: &Context, batch: Vec<Call>) {
    let mut shards: Vec<(String, Vec<Call>)> = Vec::new();
    for call in batch {
        let shard = context.keys.shard(call.op.key().as_str());
        match shards.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, calls)) => calls.push(call),
            None => shards.push((shard, vec![call])),
        }
    }
    futures_util::future::join_all(
        shards.into_iter().map(|(shard, calls)| send(context, shard, calls)),
    )
    .await;
}

/// One script call for the calls of one shard; each gets its part of the reply.
async fn send(context: &Context, shard: String, calls: Vec<Call>) {
    let mut invocation = context.script.prepare_invoke();
    invocation
        .arg(&context.incarnation)
        .arg(&context.replica_id)
        .arg(Keys::alive_prefix(&shard))
        .arg(context.lease_ms)
        .arg(context.keys.wake_prefix());
    for call in &calls {
        let (state, queue) = context.keys.turn(call.op.key().as_str());
        invocation.key(state).key(queue);
        match &call.op {
            Op::Take { key, count, tid } => {
                invocation.arg("t").arg(key.as_str()).arg(*count).arg(tid);
            }
            Op::Release { key, seq, used, keep_ms, hand_back } => {
                invocation
                    .arg("r")
                    .arg(key.as_str())
                    .arg(*seq)
                    .arg(if *used { "1" } else { "0" })
                    .arg(*keep_ms)
                    .arg(if *hand_back { "1" } else { "0" });
            }
        }
    }
    let reply: redis::RedisResult<Vec<String>> =
        invocation.invoke_async(&mut context.conn.clone()).await;
    match reply {
        Ok(flat) => {
            let mut parts = split(flat).into_iter();
            for call in calls {
                let part = parts.next().ok_or_else(|| {
                    Arc::new(redis::RedisError::from((
                        redis::ErrorKind::Parse,
                        "a batch reply shorter than its calls",
                    )))
                });
                let _ = call.reply.send(part);
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for call in calls {
                let _ = call.reply.send(Err(Arc::clone(&e)));
            }
        }
    }
}

/// Splits a batch's reply into its calls' parts: each is its length, then its items.
fn split(flat: Vec<String>) -> Vec<Vec<String>> {
    let mut parts = Vec::new();
    let mut items = flat.into_iter();
    while let Some(len) = items.next() {
        let Ok(len) = len.parse::<usize>() else { break };
        parts.push(items.by_ref().take(len).collect());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_batch_reply_splits_into_each_call_s_part() {
        let flat = ["2", "a", "b", "0", "1", "c"].map(str::to_owned).to_vec();
        let parts = split(flat);
        assert_eq!(parts, vec![vec!["a".to_owned(), "b".to_owned()], vec![], vec!["c".to_owned()]]);
    }
}
