//! What the test files of this crate share: the server's counters.

/// The script calls (`EVALSHA`, `EVAL`) the server executed since its statistics were last
/// reset.
pub(crate) async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split_once(":calls=").and_then(|(_, rest)| rest.split(',').next()))
        .map(|n| n.parse::<u64>().unwrap())
        .sum()
}

/// Resets the server's statistics, so that [`script_calls`] counts from now.
pub(crate) async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("CONFIG").arg("RESETSTAT").query_async::<()>(conn).await.unwrap();
}
