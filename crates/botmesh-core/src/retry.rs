//! The one retry policy of botmesh: exponential backoff with jitter, from 10 ms to one second,
//! for errors whose [`Recovery`](crate::traits::Recovery) is
//! [`Retry`](crate::traits::Recovery::Retry).
//!
//! The runtime uses it for everything it tries again: a chat's tickets until the turn wait
//! runs out, a release within a sixth of the lease, and the journal writes of the replica's
//! repair queue. A dropped connection that reconnects at once costs one short retry; a backend
//! down for longer costs the caller's budget.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};
use botmesh_traits::Error;
use tokio::time::Instant;

/// The shortest wait between two tries.
pub const MIN_DELAY: Duration = Duration::from_millis(10);
/// The longest wait between two tries.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

fn builder() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_jitter()
        .without_max_times()
}

/// The waits between the tries of one operation, without end.
pub(crate) fn backoff() -> ExponentialBackoff {
    builder().build()
}

/// Runs `call` until it succeeds, fails with an error that is not worth retrying, or fails
/// past `budget` from now.
///
/// A call already running when the budget ends is let finish (the backend's own timeouts
/// bound it): cutting it off could leave its effect behind unknown to the caller.
pub async fn within<T, F, Fut>(budget: Duration, call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + budget;
    call.retry(builder())
        .sleep(tokio::time::sleep)
        .when(|e: &Error| e.is_retryable() && Instant::now() < deadline)
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn dropped() -> Error {
        Error::store("inbox_ack", std::io::Error::other("connection reset"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_retryable_fault_is_tried_again_until_the_call_succeeds() {
        let calls = AtomicU32::new(0);
        let out = within(Duration::from_secs(5), || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 3 { Err(dropped()) } else { Ok(7) }
        })
        .await;
        assert_eq!(out.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fault_that_is_not_retryable_is_returned_at_once() {
        let calls = AtomicU32::new(0);
        let out: Result<(), Error> = within(Duration::from_secs(5), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::InvalidInput { reason: "too large".into() })
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn tries_stop_once_the_budget_is_spent() {
        let start = Instant::now();
        let out: Result<(), Error> =
            within(Duration::from_secs(3), || async { Err(dropped()) }).await;
        assert!(out.is_err());
        let spent = start.elapsed();
        assert!(spent >= Duration::from_secs(3), "gave up after {spent:?}");
        // The last wait began before the budget ran out; with its jitter it lasts up to twice
        // the longest delay.
        assert!(spent <= Duration::from_secs(3) + MAX_DELAY * 2, "kept going for {spent:?}");
    }

    #[test]
    fn waits_grow_and_stay_within_the_policy_s_bounds() {
        let waits: Vec<Duration> = backoff().take(20).collect();
        assert_eq!(waits.len(), 20, "the backoff never ends");
        // Jitter adds up to one more delay on top of each.
        assert!(waits.iter().all(|w| *w >= MIN_DELAY && *w <= MAX_DELAY * 2), "{waits:?}");
        assert!(waits[19] > waits[0]);
    }
}
