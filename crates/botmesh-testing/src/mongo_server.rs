//! A private MongoDB wire-protocol server for tests, since no real `mongod` runs here.
//!
//! `mongo/wire_server.py` (beside this crate's `src/`) joins `mockupdb`, which speaks the wire
//! protocol, to `mongomock`, which keeps the data, and runs every command under one lock. It
//! needs a Python with `mockupdb`, `mongomock` and `pymongo` at the versions pinned in
//! `mongo/requirements.txt`: `cargo xtask test` creates one and passes it in
//! `BOTMESH_MONGO_PYTHON`; without that variable the default place of that environment is
//! tried.

use std::io::{self, BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The server, embedded so that the crate works from the registry too.
const SCRIPT: &str = include_str!("../mongo/wire_server.py");

/// A wire-protocol MongoDB server owned by a test, killed when dropped.
#[derive(Debug)]
pub struct MongoServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Held open: the server exits when it closes, so it dies with a test that panics or is
    /// killed before its `Drop` runs.
    stdin: Option<ChildStdin>,
}

/// The Python interpreter to run the server with: `BOTMESH_MONGO_PYTHON`, else the environment
/// `cargo xtask test` creates under `$XDG_CACHE_HOME/botmesh/py` (or `~/.cache/botmesh/py`).
fn mongo_python() -> PathBuf {
    if let Some(p) = std::env::var_os("BOTMESH_MONGO_PYTHON") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    cache.map_or_else(|| PathBuf::from("python3"), |c| c.join("botmesh/py/bin/python3"))
}

impl MongoServer {
    /// Starts a server on a free loopback port and waits until it accepts connections.
    pub fn start() -> io::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("botmesh-mongo-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let script = dir.join("wire_server.py");
        std::fs::write(&script, SCRIPT)?;
        let python = mongo_python();
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--port", "0", "--exit-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "starting the Mongo wire server with {}: {e}; run `cargo xtask test` \
                         once to create its Python environment, or set BOTMESH_MONGO_PYTHON",
                        python.display()
                    ),
                )
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = Self { port: 0, dir, child: Some(child), stdin };
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port else {
            return Err(io::Error::other(format!(
                "the Mongo wire server did not start (it printed {line:?}); its Python ({}) \
                 needs the packages of crates/botmesh-testing/mongo/requirements.txt: run \
                 `cargo xtask test` once, or set BOTMESH_MONGO_PYTHON",
                mongo_python().display()
            )));
        };
        server.port = port;
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5))?;
        Ok(server)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mongodb://127.0.0.1:PORT/?directConnection=true`: one server, no replica set discovery.
    pub fn url(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }

    /// Kills the server, as a crash would. Its data is gone.
    pub fn kill(&mut self) {
        self.stdin.take();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for MongoServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
