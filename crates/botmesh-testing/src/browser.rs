//! Headless Chromium driven over WebDriver, for tests that load a bot's HTML pages (a status
//! page, a login page) in a real browser.
//!
//! [`Browser::start`] runs a private `chromedriver` on a free loopback port and opens one
//! headless session of Debian's `chromium` through it; both come from `PATH` or `/usr/bin`
//! (`apt-get install chromium chromium-driver`). Everything the browser writes (profile,
//! crash reports, shared-memory files) and chromedriver's log go to a temporary directory of
//! its own. [`Browser::close`] ends the session and stops chromedriver; a `Browser` dropped
//! without `close` (a failed test) kills chromedriver and the browser processes it started
//! instead, so no headless Chromium outlives its test.
//!
//! The helpers cover what a test usually asks of a page: [`goto`](Browser::goto),
//! [`text`](Browser::text), [`wait_for_text`](Browser::wait_for_text),
//! [`screenshot`](Browser::screenshot). Anything else goes through the `fantoccini`
//! [`Client`] that [`client`](Browser::client) returns.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use botmesh_testing::browser::{Browser, BrowserError};
//!
//! # async fn example(status_page: &str) -> Result<(), BrowserError> {
//! let browser = Browser::start().await?;
//! browser.goto(status_page).await?;
//! assert_eq!(browser.text("h1").await?, "Bot status");
//! // The page reloads itself; wait until it shows a leader.
//! let leader =
//!     browser.wait_for_text("#leader", Duration::from_secs(10), |t| t != "none").await?;
//! println!("leader: {leader}");
//! browser.screenshot("target/screenshots/status.png").await?;
//! browser.close().await?;
//! # Ok(()) }
//! ```

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep, timeout, timeout_at};

/// The arguments Chromium runs with: headless, and none of the sandbox, GPU or `/dev/shm` use
/// that containers and CI machines lack.
const CHROMIUM_ARGS: [&str; 5] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
];

/// How long chromedriver may take to answer on its port.
const DRIVER_READY: Duration = Duration::from_secs(20);

/// How long opening the browser session (starting Chromium) may take.
const SESSION_READY: Duration = Duration::from_secs(60);

/// How long [`Browser::close`] waits for the session to end before killing everything.
const SESSION_END: Duration = Duration::from_secs(20);

/// How often [`Browser::wait_for_text`] reads the element again.
const POLL: Duration = Duration::from_millis(100);

/// How many free ports are tried when chromedriver exits at once (another process took the
/// port between our probe and its bind).
const PORT_ATTEMPTS: usize = 3;

/// The lines of chromedriver's log quoted in an error.
const LOG_LINES: usize = 30;

/// The result of the browser helpers.
pub type Result<T, E = BrowserError> = std::result::Result<T, E>;

/// What can go wrong starting or driving a [`Browser`].
#[derive(Debug)]
#[non_exhaustive]
pub enum BrowserError {
    /// `chromium` or `chromedriver` is on neither `PATH` nor `/usr/bin`.
    NotInstalled {
        /// The program looked for.
        program: &'static str,
    },
    /// chromedriver could not be started, exited, or did not answer in time.
    Driver {
        /// What happened.
        reason: String,
        /// The end of chromedriver's log.
        log: String,
    },
    /// chromedriver answered, but no browser session could be opened in it.
    Session {
        /// Why, as chromedriver (or the connection to it) said.
        source: Box<dyn Error + Send + Sync>,
        /// The end of chromedriver's log.
        log: String,
    },
    /// A WebDriver command failed.
    Command {
        /// The command and its argument, e.g. ``find `#status` ``.
        command: String,
        /// The WebDriver error.
        source: Box<dyn Error + Send + Sync>,
    },
    /// [`Browser::wait_for_text`] ran out of time.
    Timeout {
        /// The CSS selector waited on.
        css: String,
        /// How long it waited.
        timeout: Duration,
        /// The last text the element had, or `None` if no element ever matched.
        last: Option<String>,
    },
    /// A local file could not be written.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for BrowserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_log = |f: &mut fmt::Formatter<'_>, log: &str| {
            if log.trim().is_empty() {
                Ok(())
            } else {
                write!(f, "; chromedriver's log ends:\n{log}")
            }
        };
        match self {
            Self::NotInstalled { program } => write!(
                f,
                "`{program}` is neither on PATH nor in /usr/bin: install chromium and chromium-driver \
                 (apt-get install chromium chromium-driver)"
            ),
            Self::Driver { reason, log } => {
                write!(f, "chromedriver {reason}")?;
                with_log(f, log)
            }
            Self::Session { source, log } => {
                write!(f, "could not open a chromium session: {source}")?;
                with_log(f, log)
            }
            Self::Command { command, source } => {
                write!(f, "webdriver command {command} failed: {source}")
            }
            Self::Timeout { css, timeout, last: Some(last) } => write!(
                f,
                "`{css}` did not show the expected text within {timeout:?}; last text seen: {last:?}"
            ),
            Self::Timeout { css, timeout, last: None } => {
                write!(f, "no element matched `{css}` within {timeout:?}")
            }
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl Error for BrowserError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Session { source, .. } | Self::Command { source, .. } => Some(source.as_ref()),
            Self::Io { source, .. } => Some(source),
            Self::NotInstalled { .. } | Self::Driver { .. } | Self::Timeout { .. } => None,
        }
    }
}

fn command_error(command: String) -> impl FnOnce(fantoccini::error::CmdError) -> BrowserError {
    move |e| BrowserError::Command { command, source: Box::new(e) }
}

/// A headless Chromium session in a private chromedriver; see the [module docs](self).
#[derive(Debug)]
pub struct Browser {
    client: Client,
    driver: Driver,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless Chromium session.
    ///
    /// Waits up to 20 seconds for chromedriver to answer and up to 60 for the browser to
    /// start. Fails with [`BrowserError::NotInstalled`] when `chromium` or `chromedriver` is
    /// missing.
    pub async fn start() -> Result<Self> {
        let chromedriver = find("chromedriver")?;
        let chromium = find("chromium")?;
        let mut attempt = 1;
        let driver = loop {
            match Driver::start(&chromedriver).await {
                Err(StartError::Exited(_)) if attempt < PORT_ATTEMPTS => attempt += 1,
                Err(StartError::Exited(e) | StartError::Failed(e)) => return Err(e),
                Ok(driver) => break driver,
            }
        };
        let mut capabilities = fantoccini::wd::Capabilities::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({ "binary": chromium, "args": CHROMIUM_ARGS }),
        );
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let client = match timeout(SESSION_READY, builder.connect(&driver.url())).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(BrowserError::Session { source: e.into(), log: driver.log() });
            }
            Err(_) => {
                let source = format!("chromium did not start within {SESSION_READY:?}").into();
                return Err(BrowserError::Session { source, log: driver.log() });
            }
        };
        Ok(Self { client, driver })
    }

    /// The WebDriver client, for what the helpers here do not cover (clicks, forms, scripts).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Loads `url` and waits until the page has loaded.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.client.goto(url).await.map_err(command_error(format!("goto {url}")))
    }

    /// Reloads the current page and waits until it has loaded.
    pub async fn refresh(&self) -> Result<()> {
        self.client.refresh().await.map_err(command_error("refresh".to_owned()))
    }

    /// The rendered text of the first element matching the CSS selector `css`.
    pub async fn text(&self, css: &str) -> Result<String> {
        let element = self
            .client
            .find(Locator::Css(css))
            .await
            .map_err(command_error(format!("find `{css}`")))?;
        element.text().await.map_err(command_error(format!("text of `{css}`")))
    }

    /// Reads the text of the first element matching `css` every 100 ms until `predicate`
    /// holds for it, and returns that text.
    ///
    /// An element that does not exist yet, or that a reload replaced while it was read, is
    /// waited for too. After `timeout`, fails with [`BrowserError::Timeout`] carrying the last
    /// text seen.
    pub async fn wait_for_text(
        &self,
        css: &str,
        timeout: Duration,
        predicate: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            let read = async { self.client.find(Locator::Css(css)).await?.text().await };
            // A read still waiting for a page to load counts against the timeout too.
            match timeout_at(deadline, read).await {
                Ok(Ok(text)) if predicate(&text) => return Ok(text),
                Ok(Ok(text)) => last = Some(text),
                Ok(Err(e)) if e.is_no_such_element() || e.is_stale_element_reference() => {}
                Ok(Err(e)) => return Err(command_error(format!("text of `{css}`"))(e)),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(BrowserError::Timeout { css: css.to_owned(), timeout, last });
            }
            sleep(POLL).await;
        }
    }

    /// Saves a PNG screenshot of the window to `path`, creating its parent directories.
    pub async fn screenshot(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let png = self.client.screenshot().await.map_err(command_error("screenshot".to_owned()))?;
        let io = |source| BrowserError::Io { path: path.to_owned(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(io)?;
        }
        tokio::fs::write(path, png).await.map_err(io)
    }

    /// Ends the browser session and stops chromedriver.
    ///
    /// Everything is stopped even when ending the session fails; the error is still returned.
    pub async fn close(self) -> Result<()> {
        let Self { client, mut driver } = self;
        let ended = match timeout(SESSION_END, client.close()).await {
            Ok(ended) => ended.map_err(command_error("close".to_owned())),
            Err(_) => Err(BrowserError::Command {
                command: "close".to_owned(),
                source: format!("the session did not end within {SESSION_END:?}").into(),
            }),
        };
        driver.stop().await;
        ended
    }
}

/// Why [`Driver::start`] failed: chromedriver exited at once (worth another port), or anything
/// else.
enum StartError {
    Exited(BrowserError),
    Failed(BrowserError),
}

/// A running chromedriver and its directory.
#[derive(Debug)]
struct Driver {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Driver {
    /// Spawns `chromedriver` on a free loopback port and waits until it answers.
    async fn start(chromedriver: &Path) -> Result<Self, StartError> {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("botmesh-browser-{}-{n}", std::process::id()));
        let io = |source| StartError::Failed(BrowserError::Io { path: dir.clone(), source });
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(io)?;
        let log = std::fs::File::create(dir.join("chromedriver.log")).map_err(io)?;
        let port = free_port().map_err(io)?;
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            // Chromium's profile, crash reports and shared memory land here, not in /tmp.
            .env("TMPDIR", &dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io)?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                let reason = format!("({}) could not be started: {e}", chromedriver.display());
                return Err(StartError::Failed(BrowserError::Driver {
                    reason,
                    log: String::new(),
                }));
            }
        };
        // From here on, dropping `driver` kills chromedriver and removes the directory.
        let mut driver = Self { child, port, dir };
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            if let Ok(Some(status)) = driver.child.try_wait() {
                let reason = format!("exited before answering on port {port} ({status})");
                return Err(StartError::Exited(BrowserError::Driver { reason, log: driver.log() }));
            }
            if driver.answers().await {
                return Ok(driver);
            }
            if Instant::now() >= deadline {
                let reason = format!("did not answer on {} within {DRIVER_READY:?}", driver.url());
                return Err(StartError::Failed(BrowserError::Driver { reason, log: driver.log() }));
            }
            sleep(Duration::from_millis(50)).await;
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether chromedriver answers `GET /status` with `ready`.
    async fn answers(&self) -> bool {
        let probe = async {
            let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await?;
            stream
                .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .await?;
            let mut answer = Vec::new();
            let mut chunk = [0; 4096];
            loop {
                let n = stream.read(&mut chunk).await?;
                answer.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&answer);
                let ready = text.replace(' ', "").contains("\"ready\":true");
                if n == 0 || ready {
                    return io::Result::Ok(ready && text.starts_with("HTTP/1.1 200"));
                }
            }
        };
        matches!(timeout(Duration::from_secs(2), probe).await, Ok(Ok(true)))
    }

    /// The last lines of chromedriver's log.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_LINES)..].join("\n")
    }

    /// Kills chromedriver and whatever it started, waits for it, and removes the directory.
    async fn stop(&mut self) {
        self.kill();
        let _ = self.child.wait().await;
        remove_dir(&self.dir);
    }

    /// Kills chromedriver and the browser processes under it, if it still runs.
    ///
    /// Killing chromedriver alone would leave Chromium running, reparented to init. The
    /// processes under it are found through `/proc` (so on Linux only; elsewhere only
    /// chromedriver is killed).
    fn kill(&mut self) {
        let Ok(None) = self.child.try_wait() else { return };
        if let Some(pid) = self.child.id() {
            let mut pids = descendants(pid);
            pids.push(pid);
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .args(pids.iter().map(u32::to_string))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill();
        remove_dir(&self.dir);
    }
}

/// Removes `dir`, once more if processes that were just killed still wrote to it.
fn remove_dir(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The processes under `root` (children, their children, ...), read from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    // (pid, parent pid) of every process; the parent is the field after the `)` that ends
    // the command name in `/proc/PID/stat`, then the state.
    let parents: Vec<(u32, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (_, after) = stat.rsplit_once(')')?;
            Some((pid, after.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}

/// A loopback port that is free now.
fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `program` on `PATH`, else in `/usr/bin`.
fn find(program: &'static str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or(BrowserError::NotInstalled { program })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_says_what_to_install() {
        let e = BrowserError::NotInstalled { program: "chromedriver" };
        assert!(e.to_string().contains("install chromium and chromium-driver"), "{e}");
    }

    #[test]
    fn a_timeout_names_the_last_text_seen() {
        let timeout = Duration::from_secs(1);
        let e = BrowserError::Timeout { css: "#n".to_owned(), timeout, last: Some("1".to_owned()) };
        assert_eq!(
            e.to_string(),
            "`#n` did not show the expected text within 1s; last text seen: \"1\""
        );
        let e = BrowserError::Timeout { css: "#n".to_owned(), timeout, last: None };
        assert_eq!(e.to_string(), "no element matched `#n` within 1s");
    }

    /// Whether `pid` still runs (a zombie waiting for its parent to reap it does not).
    #[cfg(target_os = "linux")]
    fn runs(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')').and_then(|(_, after)| after.split_whitespace().next())
                != Some("Z")
        })
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_browser_dropped_without_close_leaves_no_process_or_file_behind() {
        let browser = Browser::start().await.unwrap();
        let driver = browser.driver.child.id().unwrap();
        let dir = browser.driver.dir.clone();
        let mut pids = descendants(driver);
        assert!(!pids.is_empty(), "chromedriver started no browser");
        pids.push(driver);
        drop(browser);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().any(|&p| runs(p)) && Instant::now() < deadline {
            sleep(Duration::from_millis(50)).await;
        }
        let left: Vec<u32> = pids.into_iter().filter(|&p| runs(p)).collect();
        assert!(left.is_empty(), "still running: {left:?}");
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn descendants_of_this_process_include_a_child_it_spawned() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert!(descendants(std::process::id()).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
