//! What the stand-in holds: its settings, the gateway connections and sessions, what the bot
//! did over HTTP, and the faults it was told to inject. One lock; nothing awaits under it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::fixtures;
use super::records::{Fault, InteractionCallback, SentMessage, SentReaction};

/// What the stand-in is set up with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) token: String,
    pub(crate) bot_id: u64,
    pub(crate) bot_name: String,
    pub(crate) app_id: u64,
    pub(crate) heartbeat: Duration,
    pub(crate) session_starts: u64,
    pub(crate) session_reset: Duration,
}

/// A frame for one gateway connection to send, in order.
#[derive(Debug)]
pub(crate) enum Frame {
    Text(String),
    Close(u16, &'static str),
}

/// One websocket connection to the gateway.
#[derive(Debug)]
struct Conn {
    tx: mpsc::UnboundedSender<Frame>,
    /// The session it carries, once identified or resumed.
    session: Option<String>,
}

/// A session's dispatches, kept so that a `RESUME` can replay what the client missed.
#[derive(Debug, Default)]
struct History {
    seq: u64,
    events: Vec<(u64, String)>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) next_id: u64,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    sessions: HashMap<String, History>,
    pub(crate) live: usize,
    pub(crate) max_live: usize,
    pub(crate) identifies: Vec<Instant>,
    pub(crate) resumes: usize,
    pub(crate) refused: usize,
    pub(crate) acking: bool,
    pub(crate) revoked: bool,
    pub(crate) starts_left: u64,
    pub(crate) starts_reset: Instant,
    pub(crate) sent: Vec<SentMessage>,
    pub(crate) reactions: Vec<SentReaction>,
    pub(crate) callbacks: Vec<InteractionCallback>,
    pub(crate) dispatched: HashMap<u64, Instant>,
    pub(crate) send_faults: VecDeque<Fault>,
    pub(crate) files: HashMap<String, (String, Vec<u8>)>,
    pub(crate) messages: HashMap<u64, Value>,
}

/// The stand-in's state, shared by its handlers and the test's handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    state: Mutex<State>,
    stop: watch::Sender<bool>,
    pub(crate) base: Mutex<String>,
}

impl Shared {
    pub(crate) fn new(config: Config) -> Self {
        let starts_left = config.session_starts;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
        Self {
            config,
            state: Mutex::new(State {
                next_id: fixtures::snowflake(unix_ms, 0),
                conns: HashMap::new(),
                next_conn: 0,
                sessions: HashMap::new(),
                live: 0,
                max_live: 0,
                identifies: Vec::new(),
                resumes: 0,
                refused: 0,
                acking: true,
                revoked: false,
                starts_left,
                starts_reset: Instant::now(),
                sent: Vec::new(),
                reactions: Vec::new(),
                callbacks: Vec::new(),
                dispatched: HashMap::new(),
                send_faults: VecDeque::new(),
                files: HashMap::new(),
                messages: HashMap::new(),
            }),
            stop: watch::Sender::new(false),
            base: Mutex::new(String::new()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The server's base URL, `http://127.0.0.1:P`.
    pub(crate) fn base(&self) -> String {
        self.base.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Resolves once the handle is dropped.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    pub(crate) fn close(&self) {
        self.stop.send_replace(true);
    }

    /// Whether `presented` (with or without the `Bot ` prefix) is the bot's token, still valid.
    pub(crate) fn authorized(&self, presented: &str) -> bool {
        let presented = presented.strip_prefix("Bot ").unwrap_or(presented);
        presented == self.config.token && !self.lock().revoked
    }

    /// The next snowflake.
    pub(crate) fn next_id(&self) -> u64 {
        let mut s = self.lock();
        s.next_id += 1;
        s.next_id
    }

    /// The bot's user object.
    pub(crate) fn bot_user(&self) -> Value {
        fixtures::user(self.config.bot_id, &self.config.bot_name, true)
    }

    /// Registers a new gateway connection.
    pub(crate) fn connect(&self, tx: mpsc::UnboundedSender<Frame>) -> u64 {
        let mut s = self.lock();
        s.next_conn += 1;
        let id = s.next_conn;
        s.conns.insert(id, Conn { tx, session: None });
        id
    }

    /// Forgets a connection that closed; its session, if any, stops being live.
    pub(crate) fn disconnect(&self, conn: u64) {
        let mut s = self.lock();
        if let Some(c) = s.conns.remove(&conn)
            && c.session.is_some()
        {
            s.live = s.live.saturating_sub(1);
        }
    }

    /// Handles one frame a client sent on connection `conn`.
    pub(crate) fn on_frame(&self, conn: u64, text: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(text) else {
            self.send(conn, Frame::Close(4002, "decode error"));
            return;
        };
        match frame["op"].as_u64() {
            Some(1) => {
                if self.lock().acking {
                    self.send(conn, Frame::Text(json!({"op": 11, "d": null}).to_string()));
                }
            }
            Some(2) => self.identify(conn, &frame["d"]),
            Some(6) => self.resume(conn, &frame["d"]),
            // Presence updates and the rest: accepted and ignored.
            Some(_) => {}
            None => self.send(conn, Frame::Close(4001, "unknown opcode")),
        }
    }

    fn send(&self, conn: u64, frame: Frame) {
        if let Some(c) = self.lock().conns.get(&conn) {
            let _ = c.tx.send(frame);
        }
    }

    fn identify(&self, conn: u64, d: &Value) {
        let token = d["token"].as_str().unwrap_or_default();
        if !self.authorized(token) {
            self.lock().refused += 1;
            self.send(conn, Frame::Close(4004, "authentication failed"));
            return;
        }
        let session_id = format!("session-{}", self.next_id());
        let resume_url = format!("{}/gateway", self.base().replacen("http", "ws", 1));
        let ready = fixtures::ready(&self.bot_user(), self.config.app_id, &session_id, &resume_url);
        let mut s = self.lock();
        if s.starts_reset.elapsed() >= self.config.session_reset {
            s.starts_left = self.config.session_starts;
            s.starts_reset = Instant::now();
        }
        s.starts_left = s.starts_left.saturating_sub(1);
        s.identifies.push(Instant::now());
        let already = s.conns.get(&conn).is_some_and(|c| c.session.is_some());
        if let Some(c) = s.conns.get_mut(&conn) {
            c.session = Some(session_id.clone());
        }
        if !already {
            s.live += 1;
            s.max_live = s.max_live.max(s.live);
        }
        s.sessions.insert(session_id.clone(), History::default());
        drop(s);
        self.dispatch_to(conn, &session_id, "READY", &ready);
    }

    fn resume(&self, conn: u64, d: &Value) {
        let token = d["token"].as_str().unwrap_or_default();
        let session_id = d["session_id"].as_str().unwrap_or_default().to_owned();
        let seq = d["seq"].as_u64().unwrap_or(0);
        let mut s = self.lock();
        let known = s.sessions.contains_key(&session_id);
        if !self.authorized_locked(&s, token) || !known {
            drop(s);
            self.send(conn, Frame::Text(json!({"op": 9, "d": false}).to_string()));
            return;
        }
        s.resumes += 1;
        // The session moves to this connection; an older connection carrying it is closed.
        let older: Vec<u64> = s
            .conns
            .iter()
            .filter(|(id, c)| **id != conn && c.session.as_deref() == Some(session_id.as_str()))
            .map(|(id, _)| *id)
            .collect();
        for id in older {
            if let Some(c) = s.conns.get_mut(&id) {
                c.session = None;
                let _ = c.tx.send(Frame::Close(4000, "session resumed elsewhere"));
                s.live = s.live.saturating_sub(1);
            }
        }
        let already = s.conns.get(&conn).is_some_and(|c| c.session.is_some());
        if let Some(c) = s.conns.get_mut(&conn) {
            c.session = Some(session_id.clone());
        }
        if !already {
            s.live += 1;
            s.max_live = s.max_live.max(s.live);
        }
        let missed: Vec<String> = s
            .sessions
            .get(&session_id)
            .map(|h| h.events.iter().filter(|(n, _)| *n > seq).map(|(_, e)| e.clone()).collect())
            .unwrap_or_default();
        if let Some(c) = s.conns.get(&conn) {
            for event in missed {
                let _ = c.tx.send(Frame::Text(event));
            }
        }
        drop(s);
        self.dispatch_to(conn, &session_id, "RESUMED", &json!({}));
    }

    fn authorized_locked(&self, s: &State, presented: &str) -> bool {
        let presented = presented.strip_prefix("Bot ").unwrap_or(presented);
        presented == self.config.token && !s.revoked
    }

    /// Sends dispatch `t` with payload `d` on `conn`, numbered in its session.
    fn dispatch_to(&self, conn: u64, session: &str, t: &str, d: &Value) {
        let mut s = self.lock();
        let Some(history) = s.sessions.get_mut(session) else { return };
        history.seq += 1;
        let frame = json!({"op": 0, "s": history.seq, "t": t, "d": d}).to_string();
        history.events.push((history.seq, frame.clone()));
        if let Some(c) = s.conns.get(&conn) {
            let _ = c.tx.send(Frame::Text(frame));
        }
    }

    /// Sends dispatch `t` to every live session; returns how many it reached.
    pub(crate) fn dispatch(&self, t: &str, d: &Value) -> usize {
        let targets: Vec<(u64, String)> = self
            .lock()
            .conns
            .iter()
            .filter_map(|(id, c)| c.session.clone().map(|s| (*id, s)))
            .collect();
        for (conn, session) in &targets {
            self.dispatch_to(*conn, session, t, d);
        }
        targets.len()
    }

    /// Sends `frame` to every connection, live or not.
    pub(crate) fn broadcast(&self, frame: impl Fn() -> Frame) {
        for c in self.lock().conns.values() {
            let _ = c.tx.send(frame());
        }
    }
}

impl Shared {
    /// Sends `INVALID_SESSION` (`d: resumable`) on every live connection; the sessions stop
    /// being live, and unless `resumable` they are forgotten.
    pub(crate) fn invalidate(&self, resumable: bool) {
        let mut s = self.lock();
        let frame = json!({"op": 9, "d": resumable}).to_string();
        let mut ended = 0;
        for c in s.conns.values_mut() {
            if c.session.take().is_some() {
                ended += 1;
                let _ = c.tx.send(Frame::Text(frame.clone()));
            }
        }
        s.live = s.live.saturating_sub(ended);
        if !resumable {
            s.sessions.clear();
        }
    }
}
