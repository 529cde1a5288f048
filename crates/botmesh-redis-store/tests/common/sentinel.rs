//! What the tests on a Sentinel topology (`RedisSentinels`) share: running its blocking
//! controls, retrying until a failover's consequences show, and the lossy failover itself.

use std::future::Future;
use std::time::Duration;

use botmesh_redis_store::{RedisCoordinator, RedisOptions};
use botmesh_testing::RedisSentinels;
use botmesh_traits::{Coordinator, Result};
use tokio::time::Instant;

/// How long a failover's consequences may take to show, on a loaded machine.
pub(crate) const SETTLE: Duration = Duration::from_secs(30);

/// Runs the topology's blocking control off the runtime's async path.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Calls `f` until it succeeds, for at most `within`; the last error otherwise.
pub(crate) async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            done => return done,
        }
    }
}

/// Waits until the replica has everything the master has now: a probe written to the master
/// shows on the replica (replication keeps the master's order).
pub(crate) async fn replicated(topology: &RedisSentinels) {
    let probe = format!("{:?}", std::time::SystemTime::now());
    let (master, replica) =
        blocking(|| (topology.master_port().unwrap(), topology.replica_port().unwrap()));
    blocking(|| topology.cli(master, &["SET", "probe", &probe]).unwrap());
    let deadline = Instant::now() + SETTLE;
    while blocking(|| topology.cli(replica, &["GET", "probe"]).unwrap()).trim() != probe {
        assert!(Instant::now() < deadline, "the replica does not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Freezes the replica and cuts its link: nothing written from now on reaches it (not even
/// into its socket's buffer, which it would read on waking). Returns its port.
pub(crate) fn cut_off_replica(topology: &RedisSentinels) -> u16 {
    let (master, replica) =
        blocking(|| (topology.master_port().unwrap(), topology.replica_port().unwrap()));
    blocking(|| topology.node(replica).unwrap().pause()).unwrap();
    let cut = blocking(|| topology.cli(master, &["CLIENT", "KILL", "TYPE", "replica"]).unwrap());
    assert_eq!(cut.trim(), "1", "one replication link cut");
    replica
}

/// Kills the master, wakes the replica cut off by [`cut_off_replica`] at once (before the
/// sentinels take it for down too), and waits until it is promoted without what the master
/// took meanwhile. Returns the killed master's port.
pub(crate) fn lose_master(topology: &mut RedisSentinels, replica: u16) -> u16 {
    let killed = blocking(|| topology.kill_master()).unwrap();
    blocking(|| topology.node(replica).unwrap().resume()).unwrap();
    let new = blocking(|| topology.wait_for_master_change(killed)).unwrap();
    assert_eq!(new, replica);
    killed
}

/// Replicas "a" and "b": coordinators on the topology under `prefix`, with `lease`, waiting
/// for one replica up to `wait` when given; both heartbeat once (tried again while the replica
/// catches up, as the runtime's loop does).
pub(crate) async fn two_replicas(
    topology: &RedisSentinels,
    prefix: &str,
    lease: Duration,
    wait: Option<Duration>,
) -> (RedisCoordinator, RedisCoordinator) {
    let mut options = RedisOptions::new(&topology.url(), prefix);
    if let Some(wait) = wait {
        options = options.wait_for_replicas(1, wait);
    }
    let a = RedisCoordinator::connect(options.clone()).await.unwrap().with_replica_id("a");
    let b = RedisCoordinator::connect(options).await.unwrap().with_replica_id("b");
    let (a, b) = (a.with_lease(lease), b.with_lease(lease));
    eventually(SETTLE, || a.heartbeat(lease)).await.unwrap();
    eventually(SETTLE, || b.heartbeat(lease)).await.unwrap();
    (a, b)
}
