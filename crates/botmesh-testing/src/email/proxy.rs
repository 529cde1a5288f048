//! A fault-injecting TCP proxy for IMAP: put it between an e-mail bot and a [`DovecotServer`]
//! to make the real server refuse a chosen command, or freeze with its connections open.
//!
//! The proxy reads the IMAP lines crossing it (literals, such as a mail's bytes, pass through
//! untouched and are never taken for lines), so that it can answer a client's command itself
//! and put its answer between two of the server's responses, never inside one.
//!
//! [`DovecotServer`]: super::DovecotServer

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};

/// A loopback proxy in front of an IMAP server, with injected faults. Stopped when dropped
/// (every connection through it is closed then).
///
/// - [`refuse_next`](Self::refuse_next): the next command of a kind (`UID SEARCH`,
///   `UID FETCH`, `UID STORE`, ...) never reaches the server; the proxy answers it with a
///   tagged `NO`, as a server that refuses it does.
/// - [`freeze`](Self::freeze): the connections open now stop forwarding in both directions
///   while their sockets stay open, as with a server process that hangs or a network that
///   drops every packet. Connections made afterwards are forwarded as usual.
///
/// ```no_run
/// use botmesh_testing::email::{DovecotServer, ImapProxy};
///
/// # async fn demo() -> std::io::Result<()> {
/// let server = DovecotServer::start()?;
/// let proxy = ImapProxy::start(server.port()).await?;
/// // ... point the bot's IMAP settings at proxy.host() and proxy.port() ...
/// proxy.refuse_next("UID FETCH");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ImapProxy {
    port: u16,
    shared: Arc<Shared>,
    listener: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The commands to refuse, in upper case, oldest first.
    refuse: Mutex<Vec<String>>,
    refused: AtomicUsize,
    accepted: AtomicUsize,
    links: Mutex<Vec<Link>>,
}

/// One connection through the proxy.
#[derive(Debug)]
struct Link {
    frozen: Arc<AtomicBool>,
    tasks: [AbortHandle; 2],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ImapProxy {
    /// Starts a proxy on a free loopback port that forwards each connection to the IMAP
    /// server on `127.0.0.1:upstream` (such as [`DovecotServer::port`]).
    ///
    /// [`DovecotServer::port`]: super::DovecotServer::port
    pub async fn start(upstream: u16) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        let listener = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let frozen = Arc::new(AtomicBool::new(false));
                let (client_in, client_out) = client.into_split();
                let (server_in, server_out) = server.into_split();
                let (inject, injected) = mpsc::unbounded_channel();
                let up = tokio::spawn(commands(
                    client_in,
                    server_out,
                    inject,
                    Arc::clone(&state),
                    Arc::clone(&frozen),
                ));
                let down =
                    tokio::spawn(responses(server_in, client_out, injected, Arc::clone(&frozen)));
                let mut links = lock(&state.links);
                links.retain(|l| !l.tasks.iter().all(AbortHandle::is_finished));
                links.push(Link { frozen, tasks: [up.abort_handle(), down.abort_handle()] });
            }
        });
        Ok(Self { port, shared, listener })
    }

    /// The proxy's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// Refuses the next command that starts with `command` (compared without regard to case,
    /// after the client's tag: `"UID SEARCH"`, `"UID FETCH"`, `"UID STORE"`, `"NOOP"`): it is
    /// not forwarded, and the client gets `<tag> NO [UNAVAILABLE] ...` instead of the server's
    /// answer, so the server's state is left as it was. Each call refuses one more command;
    /// the refusals wait, in order, for their commands, on whichever connection they come.
    pub fn refuse_next(&self, command: &str) {
        lock(&self.shared.refuse).push(command.trim().to_ascii_uppercase());
    }

    /// How many commands were refused so far.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Freezes every connection open now: nothing more is forwarded either way, and both
    /// sockets stay open, so neither side sees the connection end. They stay frozen until the
    /// proxy is dropped. Connections made afterwards are forwarded.
    pub fn freeze(&self) {
        for link in lock(&self.shared.links).iter() {
            link.frozen.store(true, Ordering::SeqCst);
        }
    }

    /// How many connections the proxy accepted (and connected to the server) so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ImapProxy {
    fn drop(&mut self) {
        self.listener.abort();
        for link in lock(&self.shared.links).drain(..) {
            for task in link.tasks {
                task.abort();
            }
        }
    }
}

/// Waits forever once `frozen` is set: the caller keeps its sockets and forwards nothing.
async fn hold(frozen: &AtomicBool) {
    if frozen.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
}

/// Finds where IMAP lines end in a byte stream, skipping the literals (`{n}` at the end of a
/// line announces `n` raw bytes that belong to the same line).
#[derive(Debug, Default)]
struct Lines {
    /// The current line so far, without its literals.
    line: Vec<u8>,
    /// The bytes of a literal still to come.
    literal: usize,
}

impl Lines {
    /// Whether the stream is between two lines.
    fn between(&self) -> bool {
        self.line.is_empty() && self.literal == 0
    }

    /// Reads `data`; calls `done(end, line)` for each line that ends in it, with the offset
    /// just past the line's end and the line's text (literals left out).
    fn feed(&mut self, data: &[u8], mut done: impl FnMut(usize, &[u8])) {
        let mut i = 0;
        while i < data.len() {
            if self.literal > 0 {
                let skip = self.literal.min(data.len() - i);
                self.literal -= skip;
                i += skip;
                continue;
            }
            self.line.push(data[i]);
            i += 1;
            if !self.line.ends_with(b"\r\n") {
                continue;
            }
            match literal_size(&self.line[..self.line.len() - 2]) {
                Some(n) if n > 0 => self.literal = n,
                _ => {
                    done(i, &self.line);
                    self.line.clear();
                }
            }
        }
    }
}

/// The size of the literal announced at the end of `line` (`{12}` or `{12+}`), if any.
fn literal_size(line: &[u8]) -> Option<usize> {
    let inner = line.strip_suffix(b"}")?;
    let open = inner.iter().rposition(|b| *b == b'{')?;
    let digits = &inner[open + 1..];
    let digits = digits.strip_suffix(b"+").unwrap_or(digits);
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Splits what the client sends into what to forward and the commands to answer instead.
/// A line is forwarded once it is whole (or a literal announced at its end may follow), so a
/// command is never half forwarded when it turns out to be one to refuse.
#[derive(Debug, Default)]
struct Requests {
    /// The line's text since its last line end (or the last literal), not forwarded yet.
    text: Vec<u8>,
    /// The bytes of a literal still to come.
    literal: usize,
    /// Whether the text continues a line after a literal (not a command of its own).
    continued: bool,
}

impl Requests {
    /// Reads `data`: appends what to forward now to `out`, and offers each line that is a
    /// whole command without a literal to `answer`, which keeps it from the server by
    /// returning `true`.
    fn feed(&mut self, data: &[u8], out: &mut Vec<u8>, mut answer: impl FnMut(&[u8]) -> bool) {
        let mut i = 0;
        while i < data.len() {
            if self.literal > 0 {
                let take = self.literal.min(data.len() - i);
                out.extend_from_slice(&data[i..i + take]);
                self.literal -= take;
                i += take;
                continue;
            }
            self.text.push(data[i]);
            i += 1;
            if !self.text.ends_with(b"\r\n") {
                continue;
            }
            let segment = std::mem::take(&mut self.text);
            let literal = literal_size(&segment[..segment.len() - 2]);
            let whole = !self.continued && literal.is_none();
            if !(whole && answer(&segment)) {
                out.extend_from_slice(&segment);
            }
            self.continued = literal.is_some();
            self.literal = literal.unwrap_or(0);
        }
    }
}

/// The client's side: forwards its commands to the server, except those to refuse, which are
/// answered through `inject`.
async fn commands(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    inject: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
    frozen: Arc<AtomicBool>,
) {
    let mut requests = Requests::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        hold(&frozen).await;
        let mut out = Vec::with_capacity(n);
        requests.feed(&buf[..n], &mut out, |line| match refusal(&shared, line) {
            Some(answer) => inject.send(answer).is_ok(),
            None => false,
        });
        if to.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// The tagged `NO` for `line` when it is a command to refuse (one without a literal), taking
/// that refusal off the list.
fn refusal(shared: &Shared, line: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(line).ok()?.trim_end();
    let (tag, command) = text.split_once(' ')?;
    let upper = command.to_ascii_uppercase();
    let mut refuse = lock(&shared.refuse);
    let at = refuse.iter().position(|c| upper.starts_with(c.as_str()))?;
    refuse.remove(at);
    shared.refused.fetch_add(1, Ordering::SeqCst);
    Some(format!("{tag} NO [UNAVAILABLE] refused by the botmesh-testing proxy\r\n").into_bytes())
}

/// The server's side: forwards its responses to the client, and the proxy's own answers in
/// between two of them.
async fn responses(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut injected: mpsc::UnboundedReceiver<Vec<u8>>,
    frozen: Arc<AtomicBool>,
) {
    let mut lines = Lines::default();
    let mut waiting: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = from.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                hold(&frozen).await;
                let mut out = Vec::with_capacity(n);
                let mut start = 0;
                let mut ends = Vec::new();
                lines.feed(&buf[..n], |end, _| ends.push(end));
                for end in ends {
                    out.extend_from_slice(&buf[start..end]);
                    start = end;
                    for answer in waiting.drain(..) {
                        out.extend_from_slice(&answer);
                    }
                }
                out.extend_from_slice(&buf[start..n]);
                if to.write_all(&out).await.is_err() {
                    return;
                }
            }
            Some(answer) = injected.recv() => {
                hold(&frozen).await;
                if lines.between() {
                    if to.write_all(&answer).await.is_err() {
                        return;
                    }
                } else {
                    waiting.push(answer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_end_outside_literals_only() {
        let mut lines = Lines::default();
        let mut seen = Vec::new();
        let data = b"* 1 FETCH (BODY[] {7}\r\nA1 OK\r\n)\r\nA2 OK done\r\n";
        lines.feed(data, |end, line| seen.push((end, String::from_utf8_lossy(line).into_owned())));
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].1, "* 1 FETCH (BODY[] {7}\r\n)\r\n");
        assert_eq!(seen[1], (data.len(), "A2 OK done\r\n".to_owned()));
        assert!(lines.between());
        // A line cut across two reads.
        lines.feed(b"A3 O", |_, _| panic!("not a whole line"));
        assert!(!lines.between());
        lines.feed(b"K\r\n", |end, line| assert_eq!((end, line), (3, &b"A3 OK\r\n"[..])));
        assert_eq!(literal_size(b"A4 LOGIN {3+}"), Some(3));
        assert_eq!(literal_size(b"A5 NOOP"), None);
    }

    #[test]
    fn a_command_is_forwarded_whole_or_answered_whole() {
        let mut requests = Requests::default();
        let mut out = Vec::new();
        let mut offered = Vec::new();
        let mut answer = |line: &[u8]| {
            offered.push(String::from_utf8_lossy(line).into_owned());
            line.starts_with(b"A2 ")
        };
        // The tag and the command arrive apart, as a client writes them.
        requests.feed(b"A1", &mut out, &mut answer);
        requests.feed(b" NOOP\r\nA2 UID SEARCH ALL\r\nA3 LOGIN {2}\r\nab", &mut out, &mut answer);
        requests.feed(b" x\r\nA4 NOOP\r\n", &mut out, &mut answer);
        assert_eq!(String::from_utf8_lossy(&out), "A1 NOOP\r\nA3 LOGIN {2}\r\nab x\r\nA4 NOOP\r\n");
        assert_eq!(offered, ["A1 NOOP\r\n", "A2 UID SEARCH ALL\r\n", "A4 NOOP\r\n"]);
    }

    /// Sends `line` and reads until a line that starts with `tag`, within `within`.
    async fn ask(s: &mut TcpStream, line: &str, tag: &str, within: std::time::Duration) -> String {
        s.write_all(format!("{line}\r\n").as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let read = tokio::time::timeout(within, async {
            loop {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the connection ended: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(answer) = text.lines().find(|l| l.starts_with(tag)) {
                    return answer.to_owned();
                }
            }
        });
        read.await.unwrap_or_default()
    }

    #[tokio::test]
    async fn a_refused_command_gets_a_no_and_a_frozen_connection_no_answer() {
        use std::time::Duration;
        let server = super::super::DovecotServer::start().unwrap();
        let proxy = ImapProxy::start(server.port()).await.unwrap();
        let mut s = TcpStream::connect((proxy.host(), proxy.port())).await.unwrap();
        let second = Duration::from_secs(5);
        let login = format!("a LOGIN {} {}", server.user(), server.password());
        assert!(ask(&mut s, &login, "a ", second).await.starts_with("a OK"));
        assert!(ask(&mut s, "b SELECT INBOX", "b ", second).await.starts_with("b OK"));
        proxy.refuse_next("uid search");
        let refused = ask(&mut s, "c UID SEARCH ALL", "c ", second).await;
        assert!(refused.starts_with("c NO [UNAVAILABLE]"), "{refused}");
        assert_eq!(proxy.refused(), 1);
        assert!(ask(&mut s, "d UID SEARCH ALL", "d ", second).await.starts_with("d OK"));
        assert_eq!(proxy.connections(), 1);
        proxy.freeze();
        let frozen = ask(&mut s, "e NOOP", "e ", Duration::from_millis(500)).await;
        assert_eq!(frozen, "", "a frozen connection answers nothing");
        // A new connection is forwarded.
        let mut t = TcpStream::connect((proxy.host(), proxy.port())).await.unwrap();
        assert!(ask(&mut t, &login, "a ", second).await.starts_with("a OK"));
        assert_eq!(proxy.connections(), 2);
    }
}
