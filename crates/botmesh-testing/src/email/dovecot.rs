//! A private Dovecot IMAP server for tests: its own configuration, sockets, state and maildir
//! in a temporary directory, on a free loopback port, stopped when dropped.
//!
//! Mail reaches the mailbox the way a mail server delivers it: through `dovecot-lda`, which
//! writes the maildir, updates Dovecot's indexes and wakes the sessions in IDLE. How many IMAP
//! sessions are logged in is read from Dovecot itself (`doveadm who`).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where Debian puts the server and its delivery agent; `PATH` is tried for the server too.
const DOVECOT: &str = "/usr/sbin/dovecot";
const LDA: &str = "/usr/lib/dovecot/dovecot-lda";

/// The mailbox user every server has.
pub const USER: &str = "bot";
/// Its password (plaintext auth, loopback only).
pub const PASSWORD: &str = "bot-password";

/// A `dovecot` owned by a test, serving one user's maildir over plain IMAP on loopback.
#[derive(Debug)]
pub struct DovecotServer {
    port: u16,
    tls_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

/// Runs `program args`, returning its standard output, or an error with its standard error.
fn run(program: &str, args: &[&str], input: Option<&[u8]>) -> io::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("running {program}: {e}")))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!("{program} {args:?} failed: {err}")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `id FLAG [USER]`, trimmed.
fn id(flag: &str, user: Option<&str>) -> io::Result<String> {
    let mut args = vec![flag];
    args.extend(user);
    Ok(run("id", &args, None)?.trim().to_owned())
}

/// Who the server's processes and the mail run as. As root, Dovecot refuses to run its login
/// processes or to touch mail as root: the Debian package's `dovenull` and `dovecot` users do
/// that. As anyone else, Dovecot cannot switch users, so everything runs as the caller.
struct Users {
    login: String,
    internal: String,
    internal_group: String,
    mail_uid: String,
    mail_gid: String,
}

fn users() -> io::Result<Users> {
    if id("-u", None)? == "0" {
        return Ok(Users {
            login: "dovenull".to_owned(),
            internal: "dovecot".to_owned(),
            internal_group: "dovecot".to_owned(),
            mail_uid: id("-u", Some("dovecot"))?,
            mail_gid: id("-g", Some("dovecot"))?,
        });
    }
    let me = id("-un", None)?;
    Ok(Users {
        login: me.clone(),
        internal: me,
        internal_group: id("-gn", None)?,
        mail_uid: id("-u", None)?,
        mail_gid: id("-g", None)?,
    })
}

fn config(dir: &Path, port: u16, users: &Users, idle: bool, tls: Option<u16>) -> String {
    let d = dir.display();
    format!(
        "# A private server for one test: nothing here touches the machine's own Dovecot.
protocols = imap
listen = 127.0.0.1
base_dir = {d}/run
state_dir = {d}/state
instance_name = {instance}
default_internal_user = {internal}
default_internal_group = {group}
default_login_user = {login}
first_valid_uid = 0
first_valid_gid = 0
{ssl}
disable_plaintext_auth = no
auth_mechanisms = plain login
log_path = {d}/dovecot.log
mail_location = maildir:{d}/mail/%u
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={d}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {tls_port}
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
protocol imap {{
  mail_max_userip_connections = 100
  imap_idle_notify_interval = 1 secs
{capability}}}
",
        instance = instance(port),
        internal = users.internal,
        group = users.internal_group,
        login = users.login,
        uid = users.mail_uid,
        gid = users.mail_gid,
        ssl = match tls {
            Some(_) => format!("ssl = yes\nssl_cert = <{d}/server.crt\nssl_key = <{d}/server.key"),
            None => "ssl = no".to_owned(),
        },
        tls_port = tls.unwrap_or(0),
        // What Dovecot advertises once logged in, without IDLE: a server a client must poll.
        capability = if idle {
            ""
        } else {
            "  imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE LITERAL+ UIDPLUS MOVE\n"
        },
    )
}

/// A throwaway CA and a server certificate for `localhost` and `127.0.0.1`, in `dir`.
fn certificates(dir: &Path) -> io::Result<()> {
    let openssl = |args: &[&str]| -> io::Result<()> {
        let ok = Command::new("openssl")
            .current_dir(dir)
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
    let key = ["-newkey", "rsa:2048", "-nodes", "-keyout"];
    let ca = ["ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=botmesh-test-ca"];
    openssl(&[&["req", "-x509"][..], &key, &ca].concat())?;
    let server = ["server.key", "-out", "server.csr", "-subj", "/CN=localhost"];
    openssl(&[&["req"][..], &key, &server].concat())?;
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
    ])
}

/// The IMAP sessions in the output of `doveadm who -1` (one line per session).
/// The instance name of the server on `port` started by this process. Dovecot's processes
/// carry it in their titles (`dovecot-{instance}/imap`), which is how [`DovecotServer`] finds
/// the ones its master left behind.
fn instance(port: u16) -> String {
    format!("botmesh-{}-{port}", std::process::id())
}

fn imap_sessions(who: &str) -> usize {
    who.lines().filter(|l| l.split_whitespace().any(|w| w == "imap")).count()
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether the server greets on `port`.
fn greets(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 64];
    let ok = matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"* OK"));
    let _ = s.write_all(b"z LOGOUT\r\n");
    ok
}

#[allow(clippy::disallowed_methods, reason = "setup code outside any runtime's worker")]
fn nap(d: Duration) {
    std::thread::sleep(d);
}

impl DovecotServer {
    /// Starts a server on a free loopback port with one user, [`USER`], whose INBOX is
    /// empty. Fails when Dovecot is not installed (`apt-get install dovecot-imapd`).
    pub fn start() -> io::Result<Self> {
        Self::start_with(true, false)
    }

    /// Starts a server that also serves IMAP over TLS (IMAPS) on [`tls_port`](Self::tls_port),
    /// with a certificate for `localhost` and `127.0.0.1` signed by a throwaway CA
    /// ([`ca_pem`](Self::ca_pem)), made with the `openssl` command.
    pub fn start_tls() -> io::Result<Self> {
        Self::start_with(true, true)
    }

    /// Starts a server that does not offer IDLE, as some providers' servers do not: clients
    /// must poll it.
    pub fn start_without_idle() -> io::Result<Self> {
        Self::start_with(false, false)
    }

    fn start_with(idle: bool, tls: bool) -> io::Result<Self> {
        let port = free_port()?;
        let dir = std::env::temp_dir()
            .join(format!("botmesh-dovecot-{port}-{}", uuid::Uuid::new_v4().simple()));
        for sub in ["run", "state", "mail"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let users = users()?;
        // The login and mail processes run as other users when started by root: they must
        // reach the directory and own the maildir.
        run("chmod", &["755", &dir.to_string_lossy()], None)?;
        let owner = format!("{}:{}", users.mail_uid, users.mail_gid);
        run("chown", &[&owner, &dir.join("mail").to_string_lossy()], None)?;
        std::fs::write(dir.join("users"), format!("{USER}:{{PLAIN}}{PASSWORD}\n"))?;
        let tls_port = match tls {
            true => {
                certificates(&dir)?;
                Some(free_port()?)
            }
            false => None,
        };
        std::fs::write(dir.join("dovecot.conf"), config(&dir, port, &users, idle, tls_port))?;
        let mut server = Self { port, tls_port, dir, child: None };
        server.spawn()?;
        Ok(server)
    }

    fn conf(&self) -> String {
        self.dir.join("dovecot.conf").to_string_lossy().into_owned()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let program = if Path::new(DOVECOT).exists() { DOVECOT } else { "dovecot" };
        let child = Command::new(program)
            .args(["-F", "-c", &self.conf()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting dovecot (apt-get install dovecot-imapd): {e}"),
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !greets(self.port) {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("dovecot.log")).unwrap_or_default();
                return Err(io::Error::other(format!("dovecot did not start: {log}")));
            }
            nap(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The IMAP port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The IMAPS port on `127.0.0.1`, for a server started with
    /// [`start_tls`](Self::start_tls).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The PEM of the CA that signed the server's certificate (TLS servers only).
    pub fn ca_pem(&self) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join("ca.crt"))
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The mailbox user, [`USER`].
    pub fn user(&self) -> &'static str {
        USER
    }

    /// Its password, [`PASSWORD`].
    pub fn password(&self) -> &'static str {
        PASSWORD
    }

    fn doveadm(&self, args: &[&str]) -> io::Result<String> {
        let conf = self.conf();
        let mut all = vec!["-c", conf.as_str()];
        all.extend_from_slice(args);
        run("doveadm", &all, None)
    }

    /// Delivers the RFC 822 mail `raw` into the user's INBOX as a mail server does, through
    /// `dovecot-lda`: sessions in IDLE are told at once.
    pub fn deliver(&self, raw: &[u8]) -> io::Result<()> {
        let conf = self.conf();
        run(LDA, &["-c", &conf, "-d", USER], Some(raw)).map(|_| ())
    }

    /// How many IMAP sessions of the user are logged in now, as Dovecot counts them.
    pub fn sessions(&self) -> io::Result<usize> {
        Ok(imap_sessions(&self.doveadm(&["who", "-1"])?))
    }

    /// Samples [`sessions`](Self::sessions) every 10 ms in a thread until the watch is
    /// stopped or dropped, keeping the largest count seen.
    pub fn watch_sessions(&self) -> SessionWatch {
        let watch = SessionWatch {
            max: Arc::new(AtomicUsize::new(0)),
            samples: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            errors: Arc::new(Mutex::new(Vec::new())),
        };
        let conf = self.conf();
        let (max, samples, stop, errors) = (
            Arc::clone(&watch.max),
            Arc::clone(&watch.samples),
            Arc::clone(&watch.stop),
            Arc::clone(&watch.errors),
        );
        // The thread holds the configuration's path, not the server: a test that fails
        // still drops (and so stops) its server.
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match run("doveadm", &["-c", &conf, "who", "-1"], None) {
                    Ok(out) => {
                        max.fetch_max(imap_sessions(&out), Ordering::SeqCst);
                        samples.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        errors.lock().unwrap_or_else(PoisonError::into_inner).push(e.to_string())
                    }
                }
                nap(Duration::from_millis(10));
            }
        });
        watch
    }

    /// Each mail of `mailbox` as its UID and its flags (`\Seen`, ...), in UID order.
    pub fn flags(&self, mailbox: &str) -> io::Result<Vec<(u32, String)>> {
        let out = self.doveadm(&["fetch", "-u", USER, "uid flags", "mailbox", mailbox, "all"])?;
        let mut mails = Vec::new();
        let mut uid = None;
        for line in out.lines() {
            if let Some(v) = line.strip_prefix("uid: ") {
                uid = v.trim().parse().ok();
            } else if let (Some(v), Some(u)) = (line.strip_prefix("flags:"), uid.take()) {
                mails.push((u, v.trim().to_owned()));
            }
        }
        Ok(mails)
    }

    /// Deletes a mailbox (a folder) of the user, with its mail.
    pub fn delete_mailbox(&self, name: &str) -> io::Result<()> {
        self.doveadm(&["mailbox", "delete", "-u", USER, "-r", name]).map(|_| ())
    }

    /// Creates a mailbox (a folder) for the user.
    pub fn create_mailbox(&self, name: &str) -> io::Result<()> {
        self.doveadm(&["mailbox", "create", "-u", USER, name]).map(|_| ())
    }

    /// Gives `mailbox` a new UIDVALIDITY, as a server does after rebuilding its indexes: the
    /// UIDs a client kept mean nothing any more.
    pub fn set_uid_validity(&self, mailbox: &str, validity: u32) -> io::Result<()> {
        let v = validity.to_string();
        self.doveadm(&["mailbox", "update", "-u", USER, "--uid-validity", &v, mailbox]).map(|_| ())
    }

    /// Disconnects every IMAP session of the user (`doveadm kick`), as a server restart or a
    /// network failure would.
    /// Does nothing when no session is connected.
    pub fn kick(&self) -> io::Result<()> {
        match self.doveadm(&["kick", USER]) {
            Ok(_) => Ok(()),
            // `doveadm kick` fails when it found nobody to kick.
            Err(_) if self.sessions()? == 0 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stops the server: connections are cut and new ones refused until
    /// [`restart`](Self::restart). The mail stays.
    pub fn halt(&mut self) {
        self.shut_down();
    }

    /// Starts a halted server again on the same port, with the same mail.
    pub fn restart(&mut self) -> io::Result<()> {
        self.shut_down();
        self.spawn()
    }

    fn shut_down(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Sessions outlive the master unless they are cut first; then the master stops
            // its other children on SIGTERM, which `doveadm stop` sends.
            let _ = self.kick();
            let _ = self.doveadm(&["stop"]);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                nap(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            // A client that logged in again between the kick and the stop has a session the
            // master leaves running (with its log and stats processes), still serving its
            // connection: a halted server must cut it, or that client never sees it go.
            let orphans = format!("^dovecot-{}/", instance(self.port));
            let _ = Command::new("pkill")
                .args(["-KILL", "-f", &orphans])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Dovecot's log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dovecot.log")).unwrap_or_default()
    }
}

impl Drop for DovecotServer {
    fn drop(&mut self) {
        self.shut_down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The largest number of IMAP sessions Dovecot reported while it was watched; see
/// [`DovecotServer::watch_sessions`]. Samples until [`stop`](Self::stop)ped or dropped.
#[derive(Debug)]
pub struct SessionWatch {
    max: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl SessionWatch {
    /// The largest count seen so far.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    /// How many samples were taken.
    pub fn samples(&self) -> usize {
        self.samples.load(Ordering::SeqCst)
    }

    /// The errors sampling met (`doveadm` failing), if any.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops sampling.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for SessionWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_server_takes_delivered_mail_and_counts_no_session_before_a_login() {
        let server = DovecotServer::start().unwrap();
        assert!(greets(server.port()));
        server.deliver(b"From: a@b.org\r\nSubject: hi\r\n\r\nhello\r\n").unwrap();
        let flags = server.flags("INBOX").unwrap();
        assert_eq!(flags.len(), 1);
        assert!(!flags[0].1.contains("\\Seen"));
        assert_eq!(server.sessions().unwrap(), 0);
        server.create_mailbox("Other").unwrap();
        assert!(server.flags("Other").unwrap().is_empty());
    }
}
