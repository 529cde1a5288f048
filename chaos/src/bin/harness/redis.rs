//! The run's private Redis: one server, or, when the run fails Redis over (or its grants wait
//! for a replica), a master, its replica and three Sentinels that the replicas reach through a
//! `redis+sentinel://` URL. The faults on Redis act on whichever node is the master at the time.
//!
//! The topology's controls are synchronous (they wait for the sentinels, seconds at a time):
//! they run with `block_in_place`, so the platform's routes and the users go on meanwhile.

use std::time::Duration;

use anyhow::{Context, Result};
use botmesh_testing::{RedisSentinels, RedisServer};
use tokio::task::block_in_place;

pub(crate) enum Redis {
    Single(RedisServer),
    Sentinel {
        topology: RedisSentinels,
        /// How many failovers were made: they alternate between a `SENTINEL FAILOVER` and a
        /// killed master.
        failovers: u32,
    },
}

impl Redis {
    /// One server; or the Sentinel topology when `sentinel`, whose master then refuses writes
    /// it cannot pass to its replica within a second when `wait_replicas`.
    pub(crate) fn start(sentinel: bool, wait_replicas: bool) -> Result<Self> {
        if !sentinel {
            return Ok(Self::Single(
                RedisServer::start().context("starting a private redis-server")?,
            ));
        }
        let mut topology = RedisSentinels::start().context("starting Redis with Sentinel")?;
        if wait_replicas {
            topology
                .set_min_replicas_to_write(1, Duration::from_secs(1))
                .context("setting min-replicas-to-write")?;
        }
        Ok(Self::Sentinel { topology, failovers: 0 })
    }

    /// What the replicas connect to.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Single(server) => server.url(),
            Self::Sentinel { topology, .. } => topology.url(),
        }
    }

    fn master(&self) -> Result<&RedisServer> {
        match self {
            Self::Single(server) => Ok(server),
            Self::Sentinel { topology, .. } => topology.master().context("finding the master"),
        }
    }

    /// The longest a pause may freeze the master: under a Sentinel, short of the time the
    /// sentinels take it for down, so that a pause stays a pause and not an unplanned
    /// failover.
    pub(crate) fn longest_pause(&self, wanted: Duration) -> Duration {
        match self {
            Self::Single(_) => wanted,
            Self::Sentinel { .. } => wanted.min(RedisSentinels::DOWN_AFTER.mul_f64(0.7)),
        }
    }

    /// `CLIENT KILL` of every client connection of the master, normal and pub/sub.
    pub(crate) fn kill_clients(&self) -> Result<()> {
        let master = self.master()?;
        master.cli(&["CLIENT", "KILL", "TYPE", "normal"])?;
        master.cli(&["CLIENT", "KILL", "TYPE", "pubsub"])?;
        Ok(())
    }

    /// Freezes the master (SIGSTOP) for `frozen`.
    pub(crate) async fn pause(&self, frozen: Duration) -> Result<()> {
        let master = self.master()?;
        master.pause()?;
        tokio::time::sleep(frozen).await;
        master.resume()?;
        Ok(())
    }

    /// Restarts the master with no data.
    pub(crate) fn restart(&mut self) -> Result<()> {
        match self {
            Self::Single(server) => Ok(server.restart()?),
            Self::Sentinel { topology, .. } => {
                block_in_place(|| topology.restart_master_empty()).context("restarting the master")
            }
        }
    }

    /// Fails the master over to its replica, and waits until the topology is whole again (the
    /// old master a replica of the new one): by `SENTINEL FAILOVER` one time, by killing the
    /// master outright (and starting it again, empty, once the sentinels promoted its
    /// replica) the next.
    pub(crate) fn failover(&mut self) -> Result<()> {
        let Self::Sentinel { topology, failovers } = self else {
            anyhow::bail!("a failover needs Redis with Sentinel");
        };
        *failovers += 1;
        block_in_place(|| {
            if *failovers % 2 == 1 {
                topology.failover()?;
                topology.wait_for_replica()
            } else {
                let old = topology.kill_master()?;
                topology.wait_for_master_change(old)?;
                topology.revive(old)
            }
        })
        .context("failing Redis over")
    }
}
