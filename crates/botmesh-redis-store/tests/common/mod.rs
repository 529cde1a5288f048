//! What the test files of this crate share: the server's counters, and the helpers of the
//! tests on a Sentinel topology (`sentinel.rs`).
#![allow(dead_code, reason = "each test file uses its own part of these")]

pub(crate) mod sentinel;

/// How many commands the server executed, since its statistics were last reset, among those
/// whose `INFO commandstats` line starts with one of `prefixes`.
pub(crate) async fn calls(conn: &mut redis::aio::MultiplexedConnection, prefixes: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    info.lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .filter_map(|l| l.split_once(":calls=").and_then(|(_, rest)| rest.split(',').next()))
        .map(|n| n.parse::<u64>().unwrap())
        .sum()
}

/// The script calls (`EVALSHA`, `EVAL`) the server executed since its statistics were last
/// reset.
pub(crate) async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    calls(conn, &["cmdstat_evalsha:", "cmdstat_eval:"]).await
}

/// Resets the server's statistics, so that [`calls`] counts from now.
pub(crate) async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(conn).await.unwrap();
}
