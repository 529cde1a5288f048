//! The processes the harness runs: the replicas, and busy processes that compete with them
//! for the CPU.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

pub(crate) fn free_port() -> Result<u16> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A replica process and how to start it again under the same id.
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    pub(crate) command: Vec<String>,
    pub(crate) log: PathBuf,
}

impl Replica {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/webhook", self.port)
    }

    pub(crate) fn spawn(&mut self) -> Result<()> {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let (program, args) = self.command.split_first().context("empty command")?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Sends `signal` with one system call: a `kill` process would take milliseconds to
    /// start, during which the replica goes on taking messages after the fault's moment.
    pub(crate) fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self.pid().context("the replica is not running")?;
        let pid = i32::try_from(pid).ok().and_then(Pid::from_raw).context("not a process id")?;
        kill_process(pid, signal).with_context(|| format!("signalling {pid:?}"))
    }

    pub(crate) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// Waits until something answers on `port`.
pub(crate) async fn listening(port: u16, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() > deadline {
            bail!("nothing listens on port {port} after {within:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The replica binary, next to the harness's.
pub(crate) fn replica_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(format!("chaos-replica{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        bail!("{} is missing: build it with cargo build -p botmesh-chaos", path.display());
    }
    Ok(path)
}

/// Busy processes, each spinning on a core for as long as it lives, at the replicas' own
/// priority: noisy neighbours that leave the replicas and Redis a share of the machine. Killed
/// when dropped.
pub(crate) struct Contenders(Vec<Child>);

impl Contenders {
    pub(crate) fn start(count: usize) -> Result<Self> {
        let spin = |_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting a busy process")
        };
        Ok(Self((0..count).map(spin).collect::<Result<_>>()?))
    }
}

impl Drop for Contenders {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.start_kill();
        }
    }
}
