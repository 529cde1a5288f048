//! A private Redis Sentinel topology for failover tests: a master, one replica and three
//! `redis-sentinel` processes, each on a free loopback port.
//!
//! The sentinels watch the master under one name with a quorum of two, take a master for
//! down after one second without an answer ([`RedisSentinels::DOWN_AFTER`]), and fail over one replica at a
//! time. Control is synchronous, through `std::process` and `redis-cli`, as for
//! [`RedisServer`]: a test without a runtime, or a harness process that injects faults into
//! running bots, drives it the same way. Every process is killed when the handle is dropped,
//! a panicking test included; the data nodes keep nothing on disk.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis_server::{RedisServer, free_port, serves_as, wait_until};

/// The sentinels' `failover-timeout`: a failover that stalls is given up, and tried again by
/// a sentinel, after twice this.
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);

/// How long a change of the topology may take before a method gives up: a failover of a
/// killed master needs [`RedisSentinels::DOWN_AFTER`], an election and a promotion (about three seconds), one
/// that stalls is tried again after twice [`FAILOVER_TIMEOUT`], and a node brought back is
/// turned into a replica by the sentinels eight seconds after they see it. Generous, for a
/// loaded machine.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(45);

/// A `redis-sentinel` process.
#[derive(Debug)]
struct SentinelProcess {
    port: u16,
    child: Option<Child>,
}

impl SentinelProcess {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A master, its replica and three sentinels, each a private process on a free loopback port.
///
/// ```no_run
/// use botmesh_testing::RedisSentinels;
///
/// let topology = RedisSentinels::start()?;
/// let url = topology.url(); // redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/botmesh
/// let before = topology.master_port()?;
/// let after = topology.failover()?; // the replica is the master now
/// assert_ne!(before, after);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisSentinels {
    name: String,
    password: Option<String>,
    dir: PathBuf,
    /// The two data nodes: the first started as the master, the second as its replica.
    nodes: Vec<RedisServer>,
    /// What every data node starts with, besides its `--replicaof`.
    node_args: Vec<String>,
    sentinels: Vec<SentinelProcess>,
}

impl RedisSentinels {
    /// The name the sentinels watch the master under.
    pub const MASTER_NAME: &'static str = "botmesh";

    /// How long a sentinel waits without an answer before it takes a node for down
    /// (`down-after-milliseconds`).
    pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

    /// Starts the topology and waits until it is whole: the replica in sync with the master,
    /// and every sentinel naming the master, knowing the replica and the two other sentinels.
    pub fn start() -> io::Result<Self> {
        Self::start_inner(None)
    }

    /// Like [`start`](Self::start), with `password` required by both data nodes (the replica
    /// and the sentinels authenticate with it; the sentinels themselves ask for none). The
    /// [`url`](Self::url) carries it.
    pub fn start_with_password(password: &str) -> io::Result<Self> {
        Self::start_inner(Some(password))
    }

    fn start_inner(password: Option<&str>) -> io::Result<Self> {
        let dir = std::env::temp_dir()
            .join(format!("botmesh-sentinel-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut node_args = Vec::new();
        if let Some(password) = password {
            node_args.extend(["--requirepass", password, "--masterauth", password].map(From::from));
        }
        // Built up in place: a step that fails drops what was started before it.
        let mut topology = Self {
            name: Self::MASTER_NAME.to_owned(),
            password: password.map(str::to_owned),
            dir,
            nodes: Vec::new(),
            node_args,
            sentinels: Vec::new(),
        };
        let args: Vec<&str> = topology.node_args.iter().map(String::as_str).collect();
        let master = RedisServer::start_with(&args)?;
        let master_port = master.port().to_string();
        topology.nodes.push(master);
        let mut replica_args = args.clone();
        replica_args.extend(["--replicaof", "127.0.0.1", &master_port]);
        topology.nodes.push(RedisServer::start_with(&replica_args)?);
        for n in 0..3 {
            topology.start_sentinel(n)?;
        }
        let port = topology.nodes[0].port();
        topology.wait_for_replica_of(port)?;
        wait_until("the sentinels", CHANGE_TIMEOUT, || {
            topology.sentinels.iter().all(|s| {
                let m = topology.sentinel_master(s.port);
                m.get("port") == Some(&master_port)
                    && m.get("num-slaves").is_some_and(|n| n == "1")
                    && m.get("num-other-sentinels").is_some_and(|n| n == "2")
            })
        })?;
        Ok(topology)
    }

    /// Writes sentinel `n`'s configuration and starts it on a free port, trying another port
    /// when the one picked was taken meanwhile.
    fn start_sentinel(&mut self, n: usize) -> io::Result<()> {
        let master = self.nodes[0].port();
        for _ in 0..5 {
            let port = free_port()?;
            let conf = self.dir.join(format!("sentinel-{n}.conf"));
            let name = &self.name;
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = self.dir.display(),
                down = Self::DOWN_AFTER.as_millis(),
                failover = FAILOVER_TIMEOUT.as_millis(),
            );
            if let Some(password) = &self.password {
                text.push_str(&format!("sentinel auth-pass {name} {password}\n"));
            }
            std::fs::write(&conf, text)?;
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("starting redis-sentinel (apt-get install redis-sentinel): {e}"),
                    )
                })?;
            let pid = child.id();
            self.sentinels.push(SentinelProcess { port, child: Some(child) });
            let Some(sentinel) = self.sentinels.last_mut() else { continue };
            let mut exited = false;
            wait_until("redis-sentinel", Duration::from_secs(10), || {
                exited = sentinel.child.as_mut().is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
                exited || serves_as(port, pid)
            })?;
            if !exited {
                return Ok(());
            }
            // The port was taken: the process is gone, try another.
            self.sentinels.pop();
        }
        Err(io::Error::other("no free port for a sentinel"))
    }

    /// `redis+sentinel://[:PASSWORD@]127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/botmesh`: the
    /// three sentinels and the master's name, as `botmesh-redis-store` takes them.
    pub fn url(&self) -> String {
        let auth = self.password.as_ref().map(|p| format!(":{p}@")).unwrap_or_default();
        format!("redis+sentinel://{auth}{}/{}", self.sentinel_addrs().join(","), self.name)
    }

    /// The sentinels' addresses, `127.0.0.1:PORT` each.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect()
    }

    /// The name the sentinels watch the master under.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The port of the master, as most sentinels name it.
    pub fn master_port(&self) -> io::Result<u16> {
        let mut votes: HashMap<u16, usize> = HashMap::new();
        for s in &self.sentinels {
            if let Some(port) = self.sentinel_master_port(s.port) {
                *votes.entry(port).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .find(|(_, n)| *n * 2 > self.sentinels.len())
            .map(|(port, _)| port)
            .ok_or_else(|| io::Error::other("the sentinels do not agree on a master"))
    }

    /// The port of the replica: the data node that is not the master.
    pub fn replica_port(&self) -> io::Result<u16> {
        let master = self.master_port()?;
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|p| *p != master)
            .ok_or_else(|| io::Error::other("no replica"))
    }

    /// The data node on `port` (the master or the replica), to pause, resume or ask it.
    pub fn node(&self, port: u16) -> io::Result<&RedisServer> {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no data node on port {port}")))
    }

    /// The master, as the sentinels name it.
    pub fn master(&self) -> io::Result<&RedisServer> {
        self.node(self.master_port()?)
    }

    /// The replica.
    pub fn replica(&self) -> io::Result<&RedisServer> {
        self.node(self.replica_port()?)
    }

    /// Runs `redis-cli` against the data node on `port`, with the password if there is one,
    /// and returns its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> io::Result<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &port.to_string()]);
        if let Some(password) = &self.password {
            cmd.args(["--no-auth-warning", "-a", password]);
        }
        let out = cmd.args(args).stderr(Stdio::null()).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Asks the sentinels to fail the master over (`SENTINEL FAILOVER`), and waits until
    /// every sentinel names the replica as the new master and it acts as one. Returns the new
    /// master's port.
    ///
    /// The old master goes on as a master until the sentinels turn it into a replica, about
    /// eight seconds later (they close its clients' connections then);
    /// [`wait_for_replica`](Self::wait_for_replica) waits for that.
    pub fn failover(&self) -> io::Result<u16> {
        let old = self.master_port()?;
        let deadline = std::time::Instant::now() + CHANGE_TIMEOUT;
        loop {
            // A sentinel that does not know the replica fit yet answers `NOGOODSLAVE`, one
            // that is still in a failover `INPROG`: asked again until one takes it on, or the
            // failover in progress is done.
            wait_until("SENTINEL FAILOVER", CHANGE_TIMEOUT, || {
                self.moved_from(old).is_some()
                    || self.sentinels.iter().any(|s| {
                        Self::sentinel_cli(s.port, &["SENTINEL", "FAILOVER", &self.name])
                            .is_ok_and(|out| out.trim() == "OK")
                    })
            })?;
            // The sentinels give a failover they asked for up when the replica turns out
            // unfit half way (and do not try it again on their own): asked once more then.
            match self.wait_for_master_change_within(old, FAILOVER_TIMEOUT * 4) {
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(_) => {}
                done => return done,
            }
        }
    }

    /// Waits until every sentinel names a master other than the one on `old`, and that node
    /// says it is a master. Returns its port.
    pub fn wait_for_master_change(&self, old: u16) -> io::Result<u16> {
        self.wait_for_master_change_within(old, CHANGE_TIMEOUT)
    }

    fn wait_for_master_change_within(&self, old: u16, within: Duration) -> io::Result<u16> {
        let mut new = None;
        wait_until("a new master", within, || {
            new = self.moved_from(old);
            new.is_some()
        })?;
        new.ok_or_else(|| io::Error::other("no new master"))
    }

    /// The port of the master, when every sentinel names the same one, other than `old`, and
    /// that node says it is a master.
    fn moved_from(&self, old: u16) -> Option<u16> {
        let ports: Vec<Option<u16>> =
            self.sentinels.iter().map(|s| self.sentinel_master_port(s.port)).collect();
        match ports.first() {
            Some(&Some(port)) if port != old && ports.iter().all(|p| *p == Some(port)) => {
                self.role(port).is_some_and(|r| r == "master").then_some(port)
            }
            _ => None,
        }
    }

    /// Kills the master with SIGKILL, as a crash would, and returns its port. The sentinels
    /// fail it over about [`DOWN_AFTER`](Self::DOWN_AFTER) later ([`wait_for_master_change`] waits for that);
    /// [`revive`](Self::revive) brings it back.
    ///
    /// [`wait_for_master_change`]: Self::wait_for_master_change
    pub fn kill_master(&mut self) -> io::Result<u16> {
        let port = self.master_port()?;
        self.node_mut(port)?.kill();
        Ok(port)
    }

    /// Starts the data node on `port` again after [`kill_master`](Self::kill_master), empty,
    /// as the master it was, and waits until the sentinels have turned it into a replica of
    /// the current master and it is in sync (the sentinels wait about eight seconds before
    /// they reconfigure a node that came back).
    pub fn revive(&mut self, port: u16) -> io::Result<()> {
        let args = self.node_args.clone();
        let node = self.node_mut(port)?;
        if node.running() {
            return Err(io::Error::other(format!("the node on port {port} runs")));
        }
        node.set_args(args);
        node.restart()?;
        let master = self.master_port()?;
        self.wait_for_replica_of(master)
    }

    /// Kills the master and at once starts it again, empty, on the same port, before the
    /// sentinels take it for down: a Redis restarted without persistence. The replica syncs
    /// from it again, and is empty too. Waits until it is in sync.
    pub fn restart_master_empty(&mut self) -> io::Result<()> {
        let port = self.master_port()?;
        let args = self.node_args.clone();
        let node = self.node_mut(port)?;
        node.set_args(args);
        node.restart()?;
        self.wait_for_replica_of(port)
    }

    /// Waits until the replica replicates from the current master and their link is up: after
    /// [`failover`](Self::failover), once the sentinels have turned the old master into a
    /// replica.
    pub fn wait_for_replica(&self) -> io::Result<()> {
        self.wait_for_replica_of(self.master_port()?)
    }

    /// Sets `min-replicas-to-write` to `replicas` and `min-replicas-max-lag` to `max_lag`
    /// (whole seconds, at least one) on every running data node, and on every node started
    /// again later: a master then refuses writes (`NOREPLICAS`) while fewer replicas than
    /// that acknowledged it within the lag. `0` turns it off.
    pub fn set_min_replicas_to_write(
        &mut self,
        replicas: u32,
        max_lag: Duration,
    ) -> io::Result<()> {
        let lag = max_lag.as_secs().max(1).to_string();
        let replicas = replicas.to_string();
        for node in self.nodes.iter().filter(|n| n.running()) {
            for (key, value) in
                [("min-replicas-to-write", &replicas), ("min-replicas-max-lag", &lag)]
            {
                let out = self.cli(node.port(), &["CONFIG", "SET", key, value])?;
                if out.trim() != "OK" {
                    return Err(io::Error::other(format!("CONFIG SET {key}: {}", out.trim())));
                }
            }
        }
        let mut args = Vec::new();
        let mut rest = self.node_args.iter();
        while let Some(arg) = rest.next() {
            if arg == "--min-replicas-to-write" || arg == "--min-replicas-max-lag" {
                rest.next();
            } else {
                args.push(arg.clone());
            }
        }
        args.extend(["--min-replicas-to-write".to_owned(), replicas]);
        args.extend(["--min-replicas-max-lag".to_owned(), lag]);
        self.node_args = args;
        Ok(())
    }

    fn node_mut(&mut self, port: u16) -> io::Result<&mut RedisServer> {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no data node on port {port}")))
    }

    /// Waits until the data node other than `master` replicates from it with its link up, and
    /// the master counts it online.
    fn wait_for_replica_of(&self, master: u16) -> io::Result<()> {
        let replica = self
            .nodes
            .iter()
            .map(RedisServer::port)
            .find(|p| *p != master)
            .ok_or_else(|| io::Error::other("no replica"))?;
        wait_until("the replica's sync", CHANGE_TIMEOUT, || {
            let info = self.info_replication(replica);
            let master_info = self.info_replication(master);
            info.get("role").is_some_and(|r| r == "slave")
                && info.get("master_port") == Some(&master.to_string())
                && info.get("master_link_status").is_some_and(|s| s == "up")
                && master_info.get("slave0").is_some_and(|s| s.contains("state=online"))
        })
    }

    /// The data node's `INFO replication`, by field.
    fn info_replication(&self, port: u16) -> HashMap<String, String> {
        let out = self.cli(port, &["INFO", "replication"]).unwrap_or_default();
        out.lines()
            .filter_map(|l| l.trim_end().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// The first line of the data node's `ROLE`: `master` or `slave`.
    fn role(&self, port: u16) -> Option<String> {
        let out = self.cli(port, &["ROLE"]).ok()?;
        out.lines().next().map(str::to_owned)
    }

    fn sentinel_cli(port: u16, args: &[&str]) -> io::Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The master's port as the sentinel on `port` names it.
    fn sentinel_master_port(&self, port: u16) -> Option<u16> {
        let out =
            Self::sentinel_cli(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name]).ok()?;
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// `SENTINEL MASTER name` on the sentinel on `port`, by field.
    fn sentinel_master(&self, port: u16) -> HashMap<String, String> {
        let out = Self::sentinel_cli(port, &["SENTINEL", "MASTER", &self.name]).unwrap_or_default();
        let lines: Vec<&str> = out.lines().collect();
        lines.chunks_exact(2).map(|kv| (kv[0].to_owned(), kv[1].to_owned())).collect()
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        // The sentinels first, so that none fails a master over while the nodes go; the nodes
        // kill themselves when dropped (thawing a paused one first).
        for sentinel in &mut self.sentinels {
            sentinel.kill();
        }
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
