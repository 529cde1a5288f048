//! Batching across chats: calls of one kind made while earlier ones are on the wire go to Redis
//! together, in one script call per batch. An idle caller's call goes out at once, alone; under
//! load, calls queue while [`IN_FLIGHT`] batches are out, and leave together. The coordinator
//! batches its tickets and releases this way, the store its journal appends and
//! acknowledgements.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

/// Batches on the wire at once; the next waits, gathering calls, until one returns.
const IN_FLIGHT: usize = 2;

/// The most calls in one batch.
const MAX_BATCH: usize = 256;

/// What a call gets back: its part of the batch's reply, or the batch's error.
pub(crate) type Reply = Result<Vec<String>, Arc<redis::RedisError>>;

/// How one kind of call is sent in batches.
pub(crate) trait Batch: Send + Sync + 'static {
    /// One call.
    type Op: Send + 'static;

    /// Sends `ops` and returns each one's reply, in order.
    fn send(&self, ops: Vec<Self::Op>) -> impl Future<Output = Vec<Reply>> + Send;
}

struct Call<Op> {
    op: Op,
    reply: oneshot::Sender<Reply>,
}

/// The handle calls are made through; the batching task ends when it is dropped (and is
/// aborted with [`Batcher::abort`]).
pub(crate) struct Batcher<S: Batch> {
    calls: mpsc::UnboundedSender<Call<S::Op>>,
    task: JoinHandle<()>,
}

impl<S: Batch> Batcher<S> {
    /// Starts the batching task.
    pub(crate) fn spawn(sender: S) -> Self {
        let (calls, rx) = mpsc::unbounded_channel();
        Self { calls, task: tokio::spawn(drive(rx, Arc::new(sender))) }
    }

    /// Runs `op` in the next batch and returns its reply.
    pub(crate) async fn call(&self, op: S::Op) -> Reply {
        let (reply, answer) = oneshot::channel();
        let closed = || Arc::new(redis::RedisError::from(std::io::Error::other("batcher stopped")));
        self.calls.send(Call { op, reply }).map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Stops the batching task.
    pub(crate) fn abort(&self) {
        self.task.abort();
    }
}

/// Gathers calls into batches, at most [`IN_FLIGHT`] on the wire at once.
async fn drive<S: Batch>(mut rx: mpsc::UnboundedReceiver<Call<S::Op>>, sender: Arc<S>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = Vec::new();
    loop {
        // A slot first: while none is free, calls gather in the channel.
        let Ok(slot) = Arc::clone(&in_flight).acquire_owned().await else { return };
        if rx.recv_many(&mut calls, MAX_BATCH).await == 0 {
            return;
        }
        let batch = std::mem::take(&mut calls);
        let sender = Arc::clone(&sender);
        tokio::spawn(async move {
            let (ops, replies): (Vec<S::Op>, Vec<oneshot::Sender<Reply>>) =
                batch.into_iter().map(|c| (c.op, c.reply)).unzip();
            let mut results = sender.send(ops).await.into_iter();
            for reply in replies {
                let result = results.next().unwrap_or_else(|| {
                    Err(Arc::new(redis::RedisError::from((
                        redis::ErrorKind::Parse,
                        "a batch reply shorter than its calls",
                    ))))
                });
                let _ = reply.send(result);
            }
            drop(slot);
        });
    }
}

/// Splits a batch's reply into its calls' parts (each is its length, then its items), or
/// hands every call the batch's error.
pub(crate) fn split(reply: redis::RedisResult<Vec<String>>, calls: usize) -> Vec<Reply> {
    let flat = match reply {
        Ok(flat) => flat,
        Err(e) => {
            let e = Arc::new(e);
            return (0..calls).map(|_| Err(Arc::clone(&e))).collect();
        }
    };
    let mut parts = Vec::with_capacity(calls);
    let mut items = flat.into_iter();
    while let Some(len) = items.next() {
        let Ok(len) = len.parse::<usize>() else { break };
        parts.push(Ok(items.by_ref().take(len).collect()));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_batch_reply_splits_into_each_call_s_part() {
        let flat = ["2", "a", "b", "0", "1", "c"].map(str::to_owned).to_vec();
        let parts: Vec<Vec<String>> = split(Ok(flat), 3).into_iter().map(Result::unwrap).collect();
        assert_eq!(parts, vec![vec!["a".to_owned(), "b".to_owned()], vec![], vec!["c".to_owned()]]);
    }

    #[test]
    fn a_failed_batch_fails_each_call() {
        let e = redis::RedisError::from(std::io::Error::other("down"));
        let parts = split(Err(e), 2);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(Result::is_err));
    }
}
