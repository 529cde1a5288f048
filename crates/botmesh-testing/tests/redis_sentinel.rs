//! `RedisSentinels` on real processes: a failover, a killed master brought back as a replica,
//! an empty restart, `min-replicas-to-write`, and no process left behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::process::Command;
use std::time::Duration;

use botmesh_testing::RedisSentinels;

/// Whether a process with this command line runs (the ports make it ours).
fn running(port: u16) -> bool {
    let out = Command::new("pgrep").args(["-f", &format!("127.0.0.1:{port}")]).output().unwrap();
    !out.stdout.is_empty()
}

#[test]
fn a_failover_and_a_killed_master_move_the_master_and_the_data_follows() {
    let mut topology = RedisSentinels::start().unwrap();
    let first = topology.master_port().unwrap();
    assert_eq!(topology.cli(first, &["SET", "k", "1"]).unwrap().trim(), "OK");
    assert!(topology.url().starts_with("redis+sentinel://127.0.0.1:"));
    assert!(topology.url().ends_with("/botmesh"));

    let second = topology.failover().unwrap();
    assert_ne!(first, second);
    assert_eq!(topology.master_port().unwrap(), second);
    assert_eq!(topology.cli(second, &["GET", "k"]).unwrap().trim(), "1", "replicated");
    assert_eq!(topology.cli(second, &["SET", "k", "2"]).unwrap().trim(), "OK", "writable");
    // The old master is made a replica of the new one.
    topology.wait_for_replica().unwrap();
    assert_eq!(topology.replica_port().unwrap(), first);

    let killed = topology.kill_master().unwrap();
    assert_eq!(killed, second);
    let third = topology.wait_for_master_change(killed).unwrap();
    assert_eq!(third, first);
    assert_eq!(topology.cli(third, &["GET", "k"]).unwrap().trim(), "2");
    topology.revive(killed).unwrap();
    assert_eq!(topology.replica_port().unwrap(), killed);
    assert_eq!(topology.cli(killed, &["GET", "k"]).unwrap().trim(), "2", "synced back");
}

#[test]
fn an_empty_restart_loses_the_data_and_min_replicas_refuses_writes_without_a_replica() {
    let mut topology = RedisSentinels::start_with_password("s3cret").unwrap();
    assert!(topology.url().starts_with("redis+sentinel://:s3cret@127.0.0.1:"));
    let master = topology.master_port().unwrap();
    assert_eq!(topology.cli(master, &["SET", "k", "1"]).unwrap().trim(), "OK");
    topology.restart_master_empty().unwrap();
    assert_eq!(topology.master_port().unwrap(), master, "no failover");
    assert_eq!(topology.cli(master, &["GET", "k"]).unwrap().trim(), "");
    let replica = topology.replica_port().unwrap();
    assert_eq!(topology.cli(replica, &["GET", "k"]).unwrap().trim(), "", "emptied too");

    topology.set_min_replicas_to_write(1, Duration::from_secs(1)).unwrap();
    assert_eq!(topology.cli(master, &["SET", "k", "2"]).unwrap().trim(), "OK");
    topology.replica().unwrap().pause().unwrap();
    // Refused once the replica's last acknowledgement is older than the lag (1 s, counted in
    // whole seconds by the server): within a few seconds.
    let mut refused = String::new();
    for _ in 0..100 {
        refused = topology.cli(master, &["SET", "k", "3"]).unwrap();
        if refused.contains("NOREPLICAS") {
            break;
        }
        #[allow(clippy::disallowed_methods, reason = "a synchronous test, no runtime")]
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(refused.contains("NOREPLICAS"), "{refused}");
    topology.node(replica).unwrap().resume().unwrap();
}

#[test]
fn every_process_is_gone_once_the_topology_is_dropped_even_by_a_panic() {
    let mut ports = Vec::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let topology = RedisSentinels::start().unwrap();
        ports.push(topology.master_port().unwrap());
        ports.push(topology.replica_port().unwrap());
        ports.extend(
            topology
                .sentinel_addrs()
                .iter()
                .map(|a| a.rsplit(':').next().unwrap().parse::<u16>().unwrap()),
        );
        topology.replica().unwrap().pause().unwrap();
        assert!(ports.iter().all(|p| running(*p)));
        panic!("a test fails with the topology up");
    }));
    assert!(panicked.is_err());
    assert_eq!(ports.len(), 5);
    for port in ports {
        assert!(!running(port), "a process on port {port} is left");
    }
}
