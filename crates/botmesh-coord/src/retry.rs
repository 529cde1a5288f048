//! The retry policy of the coordination runtime: exponential backoff with jitter, from 10 ms to
//! one second, for errors that say they are worth trying again, until a deadline.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use botmesh_core::traits::Error;
use tokio::time::Instant;

/// Runs `call` until it succeeds, fails with an error that is not worth retrying, or fails
/// past `budget` from now: a dropped connection that reconnects at once costs one retry, a
/// backend down for longer costs the budget. A call already running when the budget ends is
/// let finish (the backend's own timeouts bound it): cutting it off could leave its effect
/// behind unknown to us.
pub(crate) async fn within<T, F, Fut>(budget: Duration, call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + budget;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times();
    call.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e: &Error| e.is_retryable() && Instant::now() < deadline)
        .await
}
