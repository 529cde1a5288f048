//! An SMTP sink: a small SMTP server on loopback that records every mail a bot sends, and can
//! be told to refuse the next one with a temporary or permanent error.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A mail the sink received.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentMail {
    /// The envelope sender (`MAIL FROM`).
    pub from: String,
    /// The envelope recipients (`RCPT TO`).
    pub to: Vec<String>,
    /// The mail as it was sent (RFC 822, CRLF line ends, dot-stuffing undone).
    pub raw: String,
}

impl SentMail {
    /// The value of header `name` (case-insensitive), unfolded, or `None`.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.raw.split("\r\n\r\n").next().unwrap_or_default();
        let mut value: Option<String> = None;
        let mut found = false;
        for line in head.split("\r\n") {
            if found && line.starts_with([' ', '\t']) {
                if let Some(v) = value.as_mut() {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                continue;
            }
            if found {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case(name)
            {
                value = Some(v.trim().to_owned());
                found = true;
            }
        }
        value
    }

    /// The text of the mail: its first `text/plain` part, decoded.
    pub fn text(&self) -> String {
        let parsed = mail_parser::MessageParser::default().parse(self.raw.as_bytes());
        let text = parsed.as_ref().and_then(|m| m.body_text(0)).unwrap_or_default();
        text.trim_end_matches(['\r', '\n']).to_owned()
    }
}

/// How the sink answers the end of the next mail's data, instead of `250`.
#[derive(Debug, Clone)]
struct Fault {
    code: u16,
    text: String,
}

#[derive(Debug, Default)]
struct State {
    mails: Vec<SentMail>,
    faults: VecDeque<Fault>,
}

/// A local SMTP server that keeps what it is sent. Stopped when dropped.
#[derive(Debug)]
pub struct SmtpSink {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SmtpSink {
    /// Starts a sink on a free loopback port. No TLS and no authentication: point the bot's
    /// SMTP settings at it as a plain relay.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(session(socket, Arc::clone(&shared)));
            }
        });
        Ok(Self { addr, state, task })
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> String {
        self.addr.ip().to_string()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every mail received, in order.
    pub fn mails(&self) -> Vec<SentMail> {
        lock(&self.state).mails.clone()
    }

    /// The mails whose envelope names `address` as a recipient, in order.
    pub fn mails_to(&self, address: &str) -> Vec<SentMail> {
        let mails = lock(&self.state).mails.clone();
        mails.into_iter().filter(|m| m.to.iter().any(|t| t.eq_ignore_ascii_case(address))).collect()
    }

    /// The texts of the mails to `address`, in order.
    pub fn texts_to(&self, address: &str) -> Vec<String> {
        self.mails_to(address).iter().map(SentMail::text).collect()
    }

    /// Answers the next mail's data with `code` and `text` (`451`, "try again later": a
    /// temporary failure; `550`: a permanent one) instead of taking it.
    pub fn fail_next(&self, code: u16, text: &str) {
        lock(&self.state).faults.push_back(Fault { code, text: text.to_owned() });
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The address inside `MAIL FROM:<a>` or `RCPT TO:<a>`.
fn address(arg: &str) -> String {
    let arg = arg.split_once(':').map_or(arg, |(_, a)| a).trim();
    let arg = arg.split_whitespace().next().unwrap_or_default();
    arg.trim_start_matches('<').trim_end_matches('>').to_owned()
}

/// One client's SMTP session.
async fn session(socket: TcpStream, state: Arc<Mutex<State>>) {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read);
    let say = async |w: &mut tokio::net::tcp::OwnedWriteHalf, s: &str| {
        w.write_all(format!("{s}\r\n").as_bytes()).await.is_ok()
    };
    if !say(&mut write, "220 sink.botmesh.test ESMTP").await {
        return;
    }
    let (mut from, mut to) = (String::new(), Vec::new());
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let command = line.trim_end().to_owned();
        let verb = command.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
        let reply = match verb.as_str() {
            "EHLO" => "250-sink.botmesh.test\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 PIPELINING",
            "HELO" => "250 sink.botmesh.test",
            "MAIL" => {
                from = address(&command);
                to.clear();
                "250 OK"
            }
            "RCPT" => {
                to.push(address(&command));
                "250 OK"
            }
            "RSET" => {
                from.clear();
                to.clear();
                "250 OK"
            }
            "NOOP" => "250 OK",
            "QUIT" => {
                let _ = say(&mut write, "221 bye").await;
                return;
            }
            "DATA" => {
                if !say(&mut write, "354 go on").await {
                    return;
                }
                let mut raw = String::new();
                loop {
                    line.clear();
                    match lines.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let l = line.trim_end_matches(['\r', '\n']);
                    if l == "." {
                        break;
                    }
                    raw.push_str(l.strip_prefix('.').unwrap_or(l));
                    raw.push_str("\r\n");
                }
                let answer = {
                    let mut s = lock(&state);
                    match s.faults.pop_front() {
                        Some(f) => format!("{} {}", f.code, f.text),
                        None => {
                            let mail = SentMail {
                                from: std::mem::take(&mut from),
                                to: std::mem::take(&mut to),
                                raw,
                            };
                            s.mails.push(mail);
                            "250 OK queued".to_owned()
                        }
                    }
                };
                if !say(&mut write, &answer).await {
                    return;
                }
                continue;
            }
            _ => "502 command not implemented",
        };
        if !say(&mut write, reply).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_unfolded_and_addresses_out_of_their_brackets() {
        let mail = SentMail {
            from: String::new(),
            to: Vec::new(),
            raw: "Subject: a\r\nReferences: <1@x>\r\n <2@x>\r\nFrom: b\r\n\r\nbody\r\n".to_owned(),
        };
        assert_eq!(mail.header("references").as_deref(), Some("<1@x> <2@x>"));
        assert_eq!(mail.header("Subject").as_deref(), Some("a"));
        assert_eq!(mail.header("To"), None);
        assert_eq!(mail.text(), "body");
        assert_eq!(address("MAIL FROM:<a@b.org> SIZE=10"), "a@b.org");
        assert_eq!(address("RCPT TO:<c@d.org>"), "c@d.org");
    }
}
