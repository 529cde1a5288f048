//! Starts the local test servers when they are down.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

struct Service {
    name: &'static str,
    port: u16,
    binary: &'static str,
    package: &'static str,
}

const SERVICES: &[Service] = &[
    Service { name: "Redis", port: 6379, binary: "redis-server", package: "redis-server" },
    Service { name: "PostgreSQL", port: 5432, binary: "pg_ctlcluster", package: "postgresql" },
    Service { name: "MariaDB", port: 3306, binary: "mariadbd", package: "mariadb-server" },
];

fn up(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

fn find(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join(binary))
        .find(|p| p.is_file())
}

/// Makes sure Redis (6379), PostgreSQL (5432) and MariaDB (3306) answer on 127.0.0.1.
pub(crate) fn ensure_all() -> Result<()> {
    for s in SERVICES {
        if up(s.port) {
            continue;
        }
        let Some(binary) = find(s.binary) else {
            bail!(
                "{} is not running on 127.0.0.1:{} and `{}` is not installed: apt-get install {}",
                s.name,
                s.port,
                s.binary,
                s.package
            );
        };
        println!("xtask: starting {} on 127.0.0.1:{}", s.name, s.port);
        start(s, &binary)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !up(s.port) {
            if Instant::now() > deadline {
                bail!("{} did not come up on 127.0.0.1:{}", s.name, s.port);
            }
            #[allow(
                clippy::disallowed_methods,
                reason = "xtask is synchronous; no runtime to block"
            )]
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Makes sure `redis-server` and `redis-cli` are installed, for tests that run their own.
pub(crate) fn ensure_redis_binary() -> Result<()> {
    for binary in ["redis-server", "redis-cli"] {
        if find(binary).is_none() {
            bail!("`{binary}` is not installed: apt-get install redis-server");
        }
    }
    Ok(())
}

fn start(s: &Service, binary: &PathBuf) -> Result<()> {
    let status = match s.port {
        6379 => {
            let dir = std::env::temp_dir().join("botmesh-redis");
            std::fs::create_dir_all(&dir)?;
            Command::new(binary)
                .args(["--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379"])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"))
                .status()
        }
        5432 => {
            let version = std::fs::read_dir("/etc/postgresql")
                .context("PostgreSQL has no cluster under /etc/postgresql")?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .max()
                .context("PostgreSQL has no cluster under /etc/postgresql")?;
            Command::new(binary)
                .args(["--skip-systemctl-redirect", &version, "main", "start"])
                .status()
        }
        _ => Command::new("start-stop-daemon")
            .args(["--start", "--oknodo", "--background", "--exec"])
            .arg(binary)
            .stdout(Stdio::null())
            .status(),
    }
    .with_context(|| format!("starting {}", s.name))?;
    if !status.success() {
        bail!("starting {} failed with {status}", s.name);
    }
    Ok(())
}

/// Where the Mongo wire server's Python environment lives: beside CI's target directory, in
/// the user's cache, so that it survives between runs. `botmesh-testing`'s `MongoServer` looks
/// in the same place when `BOTMESH_MONGO_PYTHON` is not set.
fn mongo_venv() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("botmesh").join("py")
}

/// Makes sure a Python environment with the Mongo wire server's pinned packages
/// (`crates/botmesh-testing/mongo/requirements.txt`) exists, creating or updating it with
/// `python3 -m venv` and pip when it is missing or its packages changed. Returns its
/// interpreter, for `BOTMESH_MONGO_PYTHON`.
pub(crate) fn ensure_mongo_python(root: &std::path::Path) -> Result<PathBuf> {
    let requirements = root.join("crates/botmesh-testing/mongo/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let venv = mongo_venv();
    let python = venv.join("bin").join("python3");
    let stamp = venv.join("botmesh-requirements.txt");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(python);
    }
    if find("python3").is_none() {
        bail!("the Mongo wire server needs Python 3: apt-get install python3 python3-venv");
    }
    println!("xtask: creating the Mongo wire server's Python environment in {}", venv.display());
    let status = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .context("running python3 -m venv")?;
    if !status.success() {
        bail!("python3 -m venv failed with {status}: apt-get install python3-venv");
    }
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip install -r {} failed with {status}", requirements.display());
    }
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}
