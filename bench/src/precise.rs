//! A sleep accurate to tens of microseconds, for the handlers whose duration a figure's ideal
//! schedule assumes.
//!
//! tokio's timer rounds a deadline up to its next millisecond tick, and the driver parks for
//! whole milliseconds, so `tokio::time::sleep(50 ms)` takes about 51.2 ms on this machine.
//! One thread here sleeps on the operating system's clock until the earliest deadline asked
//! for, and wakes the sleepers whose deadlines passed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A sleeper: its deadline and whom to wake.
type Sleeper = (Instant, oneshot::Sender<()>);

/// Sleeps for `d`, give or take the operating system's wake-up latency.
pub(crate) async fn sleep(d: Duration) {
    static TIMER: OnceLock<std::sync::Mutex<Sender<Sleeper>>> = OnceLock::new();
    let timer = TIMER.get_or_init(|| {
        let (tx, rx) = channel();
        std::thread::spawn(move || run(&rx));
        std::sync::Mutex::new(tx)
    });
    let (wake, woken) = oneshot::channel();
    let sent = match timer.lock() {
        Ok(tx) => tx.send((Instant::now() + d, wake)).is_ok(),
        Err(_) => false,
    };
    if !sent || woken.await.is_err() {
        // The timer thread is gone: fall back on tokio's timer.
        tokio::time::sleep(d).await;
    }
}

/// The timer thread: wakes each sleeper at its deadline.
fn run(rx: &Receiver<Sleeper>) {
    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut wakes = std::collections::HashMap::new();
    let mut next_id = 0u64;
    loop {
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = due.peek()
            && at <= now
        {
            due.pop();
            if let Some(wake) = wakes.remove(&id) {
                let _ = oneshot::Sender::send(wake, ());
            }
        }
        let next = match due.peek() {
            Some(&Reverse((at, _))) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, wake)) => {
                next_id += 1;
                due.push(Reverse((at, next_id)));
                wakes.insert(next_id, wake);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
