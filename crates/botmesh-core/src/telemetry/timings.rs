//! Timing a backend's calls: one pair of histograms (calls that succeeded, calls that failed)
//! per operation, taken once.

use std::future::Future;

use metrics::{Histogram, histogram};
use tokio::time::Instant;

/// The call timings of one backend: metric `metric` labelled by `op` and `outcome`.
///
/// The runtime wraps its store ([`STORE_CALLS`](super::STORE_CALLS)) and `botmesh-coord` its
/// coordination backend ([`COORDINATOR_CALLS`](super::COORDINATOR_CALLS)) with it.
#[derive(Debug)]
pub struct CallTimings {
    /// Per operation, in the order given to [`CallTimings::new`]: succeeded, failed.
    calls: Vec<(Histogram, Histogram)>,
}

impl CallTimings {
    /// The histograms of `ops`, taken from the recorder installed now.
    pub fn new(metric: &'static str, ops: &[&'static str]) -> Self {
        let calls = ops
            .iter()
            .map(|op| {
                (
                    histogram!(metric, "op" => *op, "outcome" => "ok"),
                    histogram!(metric, "op" => *op, "outcome" => "error"),
                )
            })
            .collect();
        Self { calls }
    }

    /// Runs `call`, operation number `op` of those given to [`CallTimings::new`], and records
    /// how long it took under its outcome.
    pub async fn time<T, E>(
        &self,
        op: usize,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = call.await;
        if let Some((ok, failed)) = self.calls.get(op) {
            let took = started.elapsed();
            if result.is_ok() { ok.record(took) } else { failed.record(took) }
        }
        result
    }
}
