//! A sleep accurate to tens of microseconds, for the handlers whose duration a figure's ideal
//! schedule assumes.
//!
//! tokio's timer rounds a deadline up to its next millisecond tick, and the driver parks for
//! whole milliseconds, so `tokio::time::sleep(50 ms)` takes about 51.2 ms on this machine.
//! One thread here sleeps on the operating system's clock until the earliest deadline asked
//! for, and wakes the sleepers whose deadlines passed. A sleeper wakes that thread only when
//! its deadline comes before every other: under a load whose deadlines come in order, the
//! thread wakes once per deadline, not once per sleeper too, so the harness's timer costs the
//! replicas it shares the cores with as little as it can.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// The sleepers, by deadline, then by arrival among equal deadlines.
#[derive(Default)]
struct Due {
    sleepers: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
    arrivals: u64,
}

/// The sleepers and the timer thread's wake-up.
#[derive(Default)]
struct Timer {
    due: Mutex<Due>,
    earlier: Condvar,
}

impl Timer {
    /// The sleepers. Every critical section leaves them whole, so a poisoned lock is taken as
    /// it is.
    fn due(&self) -> MutexGuard<'_, Due> {
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sleeps for `d`, give or take the operating system's wake-up latency.
pub(crate) async fn sleep(d: Duration) {
    static TIMER: OnceLock<Option<Arc<Timer>>> = OnceLock::new();
    let timer = TIMER.get_or_init(|| {
        let timer = Arc::new(Timer::default());
        let ours = Arc::clone(&timer);
        std::thread::Builder::new().name("precise-timer".into()).spawn(move || run(&ours)).ok()?;
        Some(timer)
    });
    let at = Instant::now() + d;
    let Some(timer) = timer else {
        // No timer thread could be started: tokio's timer, to the millisecond.
        return tokio::time::sleep_until(at.into()).await;
    };
    let (wake, woken) = oneshot::channel();
    {
        let mut due = timer.due();
        let first = due.sleepers.first_key_value().is_none_or(|(&(next, _), _)| at < next);
        due.arrivals += 1;
        let arrival = due.arrivals;
        due.sleepers.insert((at, arrival), wake);
        if first {
            timer.earlier.notify_one();
        }
    }
    if woken.await.is_err() {
        // The timer thread died: tokio's timer for what is left.
        tokio::time::sleep_until(at.into()).await;
    }
}

/// The timer thread: wakes each sleeper at its deadline.
fn run(timer: &Timer) {
    let mut ready = Vec::new();
    let mut due = timer.due();
    loop {
        let now = Instant::now();
        while let Some(entry) = due.sleepers.first_entry()
            && entry.key().0 <= now
        {
            ready.push(entry.remove());
        }
        if !ready.is_empty() {
            drop(due);
            for wake in ready.drain(..) {
                let _ = wake.send(());
            }
            due = timer.due();
            continue;
        }
        due = match due.sleepers.first_key_value() {
            Some((&(at, _), _)) => timer
                .earlier
                .wait_timeout(due, at.saturating_duration_since(now))
                .map_or_else(|e| e.into_inner().0, |(due, _)| due),
            None => timer.earlier.wait(due).unwrap_or_else(PoisonError::into_inner),
        };
    }
}
