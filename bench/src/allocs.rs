//! Allocations counted by the bench binary's global allocator: the system's, wrapped by
//! `alloc_tracker`, which keeps its counts per thread. Counting then costs an uncontended
//! store per allocation, so the throughput figures measured in the same process are not
//! taxed by it (a process-wide atomic counter cost the echo load about a tenth).

use std::future::Future;

use alloc_tracker::{ReportOperation, Session};

/// What to read of the allocations a run made: [`ReportOperation::allocations`] (every
/// thread, reallocations included) or [`ReportOperation::bytes`] (freed or not).
pub(crate) type Metric = fn(&ReportOperation) -> Option<f64>;

/// Runs `work` and returns its output with `metric` of the allocations the whole process made
/// meanwhile, divided by `iterations`.
pub(crate) async fn per_iteration<F: Future>(
    iterations: u64,
    work: F,
    metric: Metric,
) -> Result<(F::Output, f64), &'static str> {
    let session = Session::new().no_stdout().no_file();
    let operation = session.operation("work");
    let span = operation.measure_process().iterations(iterations);
    let output = work.await;
    drop(span);
    let report = session.to_report();
    let per = report
        .operations()
        .find_map(|(_, op)| metric(op))
        .ok_or("the allocation count recorded nothing")?;
    Ok((output, per))
}
