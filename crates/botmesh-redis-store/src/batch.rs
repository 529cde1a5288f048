//! Batching across chats: calls of one kind made while earlier ones are on the wire go to Redis
//! together, in one script call per batch. A call made while fewer than [`IN_FLIGHT`] are out
//! goes at once, alone, from its caller's task; under load, calls queue while the slots are
//! busy, and the slot that frees first sends what queued, in batches of at most [`MAX_BATCH`]
//! (by weight, see [`Batch::weight`]). The coordinator batches its tickets and releases this
//! way, the store its journal's writes.
//!
//! Under a burst, a batch is the script call everything after it waits for: Redis runs one
//! script at a time. So a batch is bounded by the work its script does, not by its calls
//! alone, and a call that frees waiting work (a turn given back) goes ahead of the calls
//! queued before it that start new work (see [`Batch::urgent`]).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis::{FromRedisValue, Value};
use tokio::sync::oneshot;

/// Calls (or batches) on the wire at once.
const IN_FLIGHT: usize = 2;

/// The most one batch weighs: as many plain calls (see [`Batch::weight`]).
pub(crate) const MAX_BATCH: usize = 256;

/// What a call gets back: its part of the batch's reply, or the batch's error.
pub(crate) type Reply = Result<Vec<String>, Arc<redis::RedisError>>;

/// How one kind of call is sent in batches.
pub(crate) trait Batch: Send + Sync + 'static {
    /// One call.
    type Op: Send + 'static;

    /// Sends `ops` and returns each one's reply, in order.
    fn send(&self, ops: Vec<Self::Op>) -> impl Future<Output = Vec<Reply>> + Send;

    /// What `op` weighs in a batch, in plain calls, about the work its script does for it
    /// (at least 1): a batch stops growing at [`MAX_BATCH`], so that the calls behind it wait
    /// for a script of bounded length. 1 by default.
    fn weight(_op: &Self::Op) -> usize {
        1
    }

    /// Whether `op` goes ahead of the calls queued before it that do not (in its order among
    /// those that do). No call by default.
    fn urgent(_op: &Self::Op) -> bool {
        false
    }
}

struct Call<Op> {
    op: Op,
    reply: oneshot::Sender<Reply>,
}

struct Slots<Op> {
    /// Calls or batches on the wire.
    busy: usize,
    /// Calls waiting for a slot: the urgent ones first, then the others, each oldest first. A
    /// deque: a batch leaves from the front while the rest stays where it is.
    queued: VecDeque<Call<Op>>,
    /// How many calls at the front of `queued` are urgent.
    urgent: usize,
}

impl<Op> Slots<Op> {
    /// Queues `call`: an urgent one after the urgent calls queued, another one last.
    fn queue(&mut self, call: Call<Op>, urgent: bool) {
        if urgent {
            self.queued.insert(self.urgent, call);
            self.urgent += 1;
        } else {
            self.queued.push_back(call);
        }
    }

    /// Takes the next batch from the front: at least one call, and as many more as keep it
    /// within [`MAX_BATCH`] by `weight`.
    fn next_batch(&mut self, weight: impl Fn(&Op) -> usize) -> Vec<Call<Op>> {
        let (mut total, mut len) = (0, 0);
        for call in &self.queued {
            total += weight(&call.op).max(1);
            if len > 0 && total > MAX_BATCH {
                break;
            }
            len += 1;
        }
        self.urgent = self.urgent.saturating_sub(len);
        self.queued.drain(..len).collect()
    }

    /// Drops every queued call (their callers get an error).
    fn clear(&mut self) {
        self.queued.clear();
        self.urgent = 0;
    }
}

/// Sends calls of one kind, batching those made while the slots are busy.
pub(crate) struct Batcher<S: Batch> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: Batch> {
    sender: S,
    slots: Mutex<Slots<S::Op>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The critical sections below run no user code and do not panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn short() -> Arc<redis::RedisError> {
    Arc::new(redis::RedisError::from((
        redis::ErrorKind::Parse,
        "a batch reply shorter than its calls",
    )))
}

impl<S: Batch> Batcher<S> {
    /// A batcher sending through `sender`.
    pub(crate) fn new(sender: S) -> Self {
        let slots = Mutex::new(Slots { busy: 0, queued: VecDeque::new(), urgent: 0 });
        Self { inner: Arc::new(Inner { sender, slots }) }
    }

    /// What sends the batches, for a caller with a batch of its own to send.
    pub(crate) fn sender(&self) -> &S {
        &self.inner.sender
    }

    /// Sends `op`, at once when a slot is free, else in the next batch, and returns its reply.
    pub(crate) async fn call(&self, op: S::Op) -> Reply {
        let turn = {
            let mut slots = lock(&self.inner.slots);
            if slots.busy < IN_FLIGHT {
                slots.busy += 1;
                Turn::Now(op)
            } else {
                let (reply, answer) = oneshot::channel();
                let urgent = S::urgent(&op);
                slots.queue(Call { op, reply }, urgent);
                Turn::Queued(answer)
            }
        };
        match turn {
            Turn::Queued(answer) => answer.await.unwrap_or_else(|_| {
                Err(Arc::new(redis::RedisError::from(std::io::Error::other("batch dropped"))))
            }),
            Turn::Now(op) => {
                // The slot is given back (or goes on with what queued meanwhile) even if this
                // call is dropped before its reply.
                let _slot = Slot(Arc::clone(&self.inner));
                // Boxed: under load most calls queue instead, and a call's future (boxed
                // itself behind the store's traits) should not carry room for a send.
                let mut sent = Box::pin(self.inner.sender.send(vec![op])).await;
                sent.pop().unwrap_or_else(|| Err(short()))
            }
        }
    }
}

/// Whether a call goes at once or waits in the queue.
enum Turn<Op> {
    Now(Op),
    Queued(oneshot::Receiver<Reply>),
}

/// A busy slot: when dropped, it sends what queued meanwhile, or is given back.
struct Slot<S: Batch>(Arc<Inner<S>>);

impl<S: Batch> Drop for Slot<S> {
    fn drop(&mut self) {
        let mut slots = lock(&self.0.slots);
        if slots.queued.is_empty() {
            slots.busy -= 1;
            return;
        }
        // Only under load: the slot goes on in a task of its own, batch after batch, until
        // nothing is queued. Outside a runtime (a call dropped at shutdown), what queued
        // fails instead.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                drop(slots);
                runtime.spawn(drain(Arc::clone(&self.0)));
            }
            Err(_) => {
                slots.clear();
                slots.busy -= 1;
            }
        }
    }
}

/// Sends what queued, batch after batch, then gives the slot back.
async fn drain<S: Batch>(inner: Arc<Inner<S>>) {
    loop {
        let batch: Vec<Call<S::Op>> = {
            let mut slots = lock(&inner.slots);
            if slots.queued.is_empty() {
                slots.busy -= 1;
                return;
            }
            slots.next_batch(S::weight)
        };
        let (ops, replies): (Vec<S::Op>, Vec<oneshot::Sender<Reply>>) =
            batch.into_iter().map(|c| (c.op, c.reply)).unzip();
        let mut results = inner.sender.send(ops).await.into_iter();
        for reply in replies {
            let _ = reply.send(results.next().unwrap_or_else(|| Err(short())));
        }
    }
}

/// Splits a batch's reply into its calls' parts (each is its length, then its items), or
/// hands every call the batch's error. The lengths are read where they lie (scripts return
/// them as integers), and each item becomes a string without a copy of its bytes.
pub(crate) fn split(reply: redis::RedisResult<Vec<Value>>, calls: usize) -> Vec<Reply> {
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
        let len = match len {
            Value::Int(n) => usize::try_from(n).ok(),
            Value::BulkString(b) => std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()),
            _ => None,
        };
        let Some(len) = len else { break };
        let part: redis::RedisResult<Vec<String>> = items
            .by_ref()
            .take(len)
            .map(|v| String::from_redis_value(v).map_err(redis::RedisError::from))
            .collect();
        parts.push(part.map_err(Arc::new));
    }
    parts
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use redis::Value;
    use tokio::sync::oneshot;

    use super::{Batch, Batcher, Call, IN_FLIGHT, Reply, Slots, split};

    /// Answers each call with its own number after 50 ms, recording each batch's size.
    #[derive(Default)]
    struct Echo(Mutex<Vec<usize>>);

    impl Batch for Arc<Echo> {
        type Op = u32;

        async fn send(&self, ops: Vec<u32>) -> Vec<Reply> {
            self.0.lock().unwrap().push(ops.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
            ops.into_iter().map(|n| Ok(vec![n.to_string()])).collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn calls_made_while_the_slots_are_busy_leave_together_and_each_gets_its_reply() {
        let echo = Arc::new(Echo::default());
        let batcher = Arc::new(Batcher::new(Arc::clone(&echo)));
        let calls: Vec<_> = (0..10u32)
            .map(|n| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move { batcher.call(n).await })
            })
            .collect();
        for (n, call) in calls.into_iter().enumerate() {
            assert_eq!(call.await.unwrap().unwrap(), [n.to_string()]);
        }
        let sizes = echo.0.lock().unwrap().clone();
        assert_eq!(sizes[..IN_FLIGHT], [1; IN_FLIGHT], "the first calls go at once, alone");
        assert_eq!(sizes[IN_FLIGHT..], [10 - IN_FLIGHT], "the rest in one batch");
        // Idle again: a call goes at once.
        assert_eq!(batcher.call(7).await.unwrap(), ["7"]);
        assert_eq!(echo.0.lock().unwrap().last(), Some(&1));
    }

    /// Answers each call with its own number after 50 ms, recording each batch's calls. A
    /// call weighs its number (`Heavy`), or is urgent from 100 on (`Hurried`).
    #[derive(Default)]
    struct Recorded(Mutex<Vec<Vec<u32>>>);

    struct Heavy(Arc<Recorded>);
    struct Hurried(Arc<Recorded>);

    impl Recorded {
        async fn answer(&self, ops: Vec<u32>) -> Vec<Reply> {
            self.0.lock().unwrap().push(ops.clone());
            tokio::time::sleep(Duration::from_millis(50)).await;
            ops.into_iter().map(|n| Ok(vec![n.to_string()])).collect()
        }
    }

    impl Batch for Heavy {
        type Op = u32;

        async fn send(&self, ops: Vec<u32>) -> Vec<Reply> {
            self.0.answer(ops).await
        }

        fn weight(op: &u32) -> usize {
            *op as usize
        }
    }

    impl Batch for Hurried {
        type Op = u32;

        async fn send(&self, ops: Vec<u32>) -> Vec<Reply> {
            self.0.answer(ops).await
        }

        fn urgent(op: &u32) -> bool {
            *op >= 100
        }
    }

    /// Makes `calls` in order, each from a task of its own, and checks each one's reply.
    async fn call_all<S: Batch<Op = u32>>(batcher: Batcher<S>, calls: &[u32]) {
        let batcher = Arc::new(batcher);
        let tasks: Vec<_> = calls
            .iter()
            .map(|&n| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move { (n, batcher.call(n).await) })
            })
            .collect();
        for task in tasks {
            let (n, reply) = task.await.unwrap();
            assert_eq!(reply.unwrap(), [n.to_string()]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_stops_growing_at_its_weight() {
        let recorded = Arc::new(Recorded::default());
        // Two calls take the slots; the rest queue, and leave in batches of at most 256 by
        // weight: a call heavier than that alone.
        call_all(Batcher::new(Heavy(Arc::clone(&recorded))), &[1, 1, 200, 100, 50, 300, 1]).await;
        let mut batches = recorded.0.lock().unwrap().clone();
        batches.sort();
        assert_eq!(batches, [vec![1], vec![1], vec![1], vec![100, 50], vec![200], vec![300]]);
    }

    #[tokio::test(start_paused = true)]
    async fn urgent_calls_go_ahead_of_those_queued_before_them_in_their_own_order() {
        let recorded = Arc::new(Recorded::default());
        call_all(Batcher::new(Hurried(Arc::clone(&recorded))), &[0, 1, 2, 100, 3, 101, 4]).await;
        let batches = recorded.0.lock().unwrap().clone();
        assert_eq!(batches, [vec![0], vec![1], vec![100, 101, 2, 3, 4]]);
    }

    #[test]
    fn a_cleared_queue_puts_urgent_calls_first_again() {
        let mut slots = Slots { busy: 0, queued: VecDeque::new(), urgent: 0 };
        let call = |op: u32| Call { op, reply: oneshot::channel().0 };
        slots.queue(call(1), true);
        slots.queue(call(2), false);
        slots.clear();
        slots.queue(call(3), false);
        slots.queue(call(4), true);
        slots.queue(call(5), true);
        let batch: Vec<u32> = slots.next_batch(|_| 1).into_iter().map(|c| c.op).collect();
        assert_eq!(batch, [4, 5, 3]);
        assert_eq!(slots.urgent, 0);
    }

    #[test]
    fn a_batch_reply_splits_into_each_call_s_part() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // Lengths as a script returns them (integers) or as strings; items of either kind.
        let flat =
            vec![Value::Int(2), bulk("a"), Value::Int(7), bulk("0"), Value::Int(1), bulk("c")];
        let parts: Vec<Vec<String>> = split(Ok(flat), 3).into_iter().map(Result::unwrap).collect();
        assert_eq!(parts, vec![vec!["a".to_owned(), "7".to_owned()], vec![], vec!["c".to_owned()]]);
    }

    #[test]
    fn a_failed_batch_fails_each_call() {
        let e = redis::RedisError::from(std::io::Error::other("down"));
        let parts = split(Err(e), 2);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(Result::is_err));
    }
}
