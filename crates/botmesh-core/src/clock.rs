//! Wall-clock time, as records and statuses keep it.

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
