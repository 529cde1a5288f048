//! Private `redis-server` processes for tests that kill, pause or restart Redis.
//!
//! Each server runs on a free loopback port in a directory of its own, keeps nothing on disk,
//! and is killed when its handle is dropped. Tests never touch the machine's shared Redis.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` owned by a test.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    tls_port: Option<u16>,
}

/// Picks a loopback port that is free now, and whose cluster bus port (`port + 10000`) is too.
pub(crate) fn free_port() -> io::Result<u16> {
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair found"))
}

/// A raw connection to the server on `port`, with `command` (an inline command) sent on it.
fn ask(port: u16, command: &[u8]) -> Option<TcpStream> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    s.write_all(command).ok()?;
    Some(s)
}

/// Whether a server answers on `port` and is process `pid` (its `INFO server` says so). A
/// server that wants a password cannot be asked; it counts as ours while our process runs.
pub(crate) fn serves_as(port: u16, pid: u32) -> bool {
    let Some(mut s) = ask(port, b"INFO server\r\n") else { return false };
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if text.starts_with("-NOAUTH") {
            return true;
        }
        if let Some(line) = text.lines().find(|l| l.starts_with("process_id:")) {
            // The line is whole once the next one started.
            if text.contains(&format!("{line}\r\n")) {
                return line.trim_start_matches("process_id:") == pid.to_string();
            }
        }
    }
    false
}

pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!("{what} did not become ready")));
        }
        #[allow(clippy::disallowed_methods, reason = "setup code outside any runtime's worker")]
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> io::Result<Self> {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments (`["--requirepass", "s3cret"]`).
    pub fn start_with(args: &[&str]) -> io::Result<Self> {
        // A port taken by another server in the meantime is given up for another one.
        let mut tries = 0;
        loop {
            match Self::start_on(free_port()?, args) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 5 => tries += 1,
                started => return started,
            }
        }
    }

    fn start_on(port: u16, args: &[&str]) -> io::Result<Self> {
        let dir = std::env::temp_dir()
            .join(format!("botmesh-redis-{port}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            port,
            dir,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
            tls_port: None,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts a server that also listens with TLS, on a certificate for `localhost` and
    /// `127.0.0.1` signed by a throwaway CA (made with the `openssl` command).
    pub fn start_tls() -> io::Result<Self> {
        let mut server = Self::start()?;
        server.kill();
        let dir = server.dir.clone();
        let openssl = |args: &[&str]| -> io::Result<()> {
            let ok = Command::new("openssl")
                .current_dir(&dir)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            if ok.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("openssl {args:?} failed")))
            }
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=botmesh-test-ca",
        ])?;
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ])?;
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n")?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ])?;
        let tls_port = free_port()?;
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        server.args.extend([
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path("server.crt"),
            "--tls-key-file".to_owned(),
            path("server.key"),
            "--tls-ca-cert-file".to_owned(),
            path("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]);
        server.tls_port = Some(tls_port);
        server.spawn()?;
        Ok(server)
    }

    /// `rediss://localhost:TLS_PORT/`, for a server started with [`RedisServer::start_tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://localhost:{p}/"))
    }

    /// The PEM of the CA that signed the server's certificate (TLS servers only).
    pub fn ca_pem(&self) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join("ca.crt"))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting redis-server (apt-get install redis-server): {e}"),
                )
            })?;
        let pid = child.id();
        let child = self.child.insert(child);
        let port = self.port;
        // Ready once the server on the port is this one: another test's server may have taken
        // the port between `free_port` and our bind, and would answer as well.
        let mut exited = false;
        wait_until("redis-server", Duration::from_secs(10), || {
            exited = !matches!(child.try_wait(), Ok(None));
            exited || serves_as(port, pid)
        })?;
        if exited {
            self.child = None;
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("redis-server exited at start: port {port} taken"),
            ));
        }
        Ok(())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }

    /// Replaces the extra arguments the next [`restart`](Self::restart) starts the server
    /// with (a Sentinel topology restarts a node as a master, without its `--replicaof`).
    pub(crate) fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    /// Whether the process runs (it was not killed).
    pub(crate) fn running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, signal: &str) -> io::Result<()> {
        let pid = self.child.as_ref().ok_or_else(|| io::Error::other("server not running"))?.id();
        let status = Command::new("kill").args([signal, &pid.to_string()]).status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill {signal} failed")))
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.signal("-CONT")
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let out =
            Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            // A paused server must be thawed to die promptly.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters, each a private [`RedisServer`].
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters and joins them into a cluster covering every slot.
    pub fn start() -> io::Result<Self> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ])?);
        }
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !out.success() {
            return Err(io::Error::other("redis-cli --cluster create failed"));
        }
        let cluster = Self { nodes };
        wait_until("the cluster", Duration::from_secs(20), || {
            cluster
                .nodes
                .iter()
                .all(|n| n.cli(&["cluster", "info"]).is_ok_and(|i| i.contains("cluster_state:ok")))
        })?;
        Ok(cluster)
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}
