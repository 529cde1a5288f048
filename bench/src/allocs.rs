//! Allocations counted by the bench binary's global allocator (the system's, instrumented by
//! `stats_alloc`), so a suite can say how many a message costs.

/// Allocations and reallocations made by the whole process so far.
pub(crate) fn count() -> u64 {
    let stats = crate::GLOBAL.stats();
    (stats.allocations + stats.reallocations) as u64
}
