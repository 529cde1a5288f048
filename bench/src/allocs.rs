//! Allocations counted by the bench binary's global allocator: the system's, wrapped by
//! `alloc_tracker`, which keeps its counts per thread. Counting then costs an uncontended
//! store per allocation, so the throughput figures measured in the same process are not
//! taxed by it (a process-wide atomic counter cost the echo load about a tenth).

use std::future::Future;

use alloc_tracker::{ReportOperation, Session};

/// Runs `work` and returns its output with the allocations the whole process made meanwhile
/// (every thread, reallocations included), divided by `iterations`.
pub(crate) async fn per_iteration<F: Future>(
    iterations: u64,
    work: F,
) -> Result<(F::Output, f64), &'static str> {
    let (output, op) = measured(iterations, work).await;
    Ok((output, op.and_then(|op| op.allocations()).ok_or("the allocation count recorded nothing")?))
}

/// Runs `work` and returns its output with the bytes the whole process allocated meanwhile
/// (every thread; freed or not), divided by `iterations`.
pub(crate) async fn bytes_per_iteration<F: Future>(
    iterations: u64,
    work: F,
) -> Result<(F::Output, f64), &'static str> {
    let (output, op) = measured(iterations, work).await;
    Ok((output, op.and_then(|op| op.bytes()).ok_or("the allocation count recorded nothing")?))
}

/// Runs `work` under a process-wide span of `iterations`, and returns what was recorded.
async fn measured<F: Future>(iterations: u64, work: F) -> (F::Output, Option<ReportOperation>) {
    let session = Session::new().no_stdout().no_file();
    let operation = session.operation("work");
    let span = operation.measure_process().iterations(iterations);
    let output = work.await;
    drop(span);
    let report = session.to_report();
    let op = report.operations().map(|(_, op)| op.clone()).next();
    (output, op)
}
