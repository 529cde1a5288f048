//! A sleep accurate to tens of microseconds, for the handlers whose duration a figure's ideal
//! schedule assumes.
//!
//! tokio's timer rounds a deadline up to its next millisecond tick, and the driver parks for
//! whole milliseconds, so `tokio::time::sleep(50 ms)` takes about 51.2 ms on this machine.
//! One thread here sleeps on the operating system's clock until the earliest deadline asked
//! for, and wakes the sleepers whose deadlines passed.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A sleeper: its deadline and whom to wake.
type Sleeper = (Instant, oneshot::Sender<()>);

/// Sleeps for `d`, give or take the operating system's wake-up latency.
pub(crate) async fn sleep(d: Duration) {
    static TIMER: OnceLock<Sender<Sleeper>> = OnceLock::new();
    let timer = TIMER.get_or_init(|| {
        let (tx, rx) = channel();
        std::thread::spawn(move || run(&rx));
        tx
    });
    let (wake, woken) = oneshot::channel();
    if timer.send((Instant::now() + d, wake)).is_err() || woken.await.is_err() {
        // The timer thread is gone: fall back on tokio's timer.
        tokio::time::sleep(d).await;
    }
}

/// The timer thread: wakes each sleeper at its deadline.
fn run(rx: &Receiver<Sleeper>) {
    // By deadline, then by arrival among equal deadlines.
    let mut due: BTreeMap<(Instant, u64), oneshot::Sender<()>> = BTreeMap::new();
    let mut arrivals = 0u64;
    loop {
        let now = Instant::now();
        while let Some(entry) = due.first_entry()
            && entry.key().0 <= now
        {
            let _ = entry.remove().send(());
        }
        let next = match due.first_key_value() {
            Some((&(at, _), _)) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, wake)) => {
                arrivals += 1;
                due.insert((at, arrivals), wake);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
