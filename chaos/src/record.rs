//! What travels between the harness and the replicas, what each side writes down, and the
//! monotonic clock that makes their timestamps comparable.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Nanoseconds on the machine's monotonic clock (`CLOCK_MONOTONIC`): one clock for every
/// process of a run, which never goes back.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// The id of the webhook provider the replicas run (a shared transport: every replica
/// receives).
pub const PROVIDER: &str = "chaos-webhook";

/// The id of the polling provider the replicas run (an exclusive transport: one session at a
/// time, on the elected replica).
pub const POLL_PROVIDER: &str = "chaos-poll";

/// The chat id of chat number `chat`.
pub fn chat_id(chat: u32) -> String {
    format!("c{chat}")
}

/// The chat number back from a chat id (`c12`).
pub fn parse_chat_id(id: &str) -> Option<u32> {
    id.strip_prefix('c')?.parse().ok()
}

/// The chat back from a chat key (`chaos-webhook:c12`, `chaos-poll:c13`), or from a store key
/// of the chat.
pub fn chat_of_key(key: &str) -> Option<u32> {
    let rest = key.strip_prefix(PROVIDER).or_else(|| key.strip_prefix(POLL_PROVIDER))?;
    parse_chat_id(rest.strip_prefix(':')?)
}

/// The message id of message `seq` of chat `chat`: what a webhook sender retries with.
pub fn message_id(chat: u32, seq: u32) -> String {
    format!("c{chat}-{seq}")
}

/// The chat and sequence number back from a message id.
pub fn parse_message_id(id: &str) -> Option<(u32, u32)> {
    let (chat, seq) = id.strip_prefix('c')?.split_once('-')?;
    Some((chat.parse().ok()?, seq.parse().ok()?))
}

/// A request of a polling session to the platform: open one, or close it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRequest {
    /// The replica that opens it.
    #[serde(default)]
    pub replica: String,
    /// The session to close (0 to open one).
    #[serde(default)]
    pub session: u64,
}

/// A long poll of a session: confirms every update before `offset`, and waits up to
/// `timeout_ms` for the updates from there on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Poll {
    /// The session that polls.
    pub session: u64,
    /// The first update not taken yet.
    pub offset: u64,
    /// How long the platform holds the poll while it has nothing new.
    pub timeout_ms: u64,
}

/// An update a poll returns: a user's message, numbered in the platform's queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Update {
    /// Its place in the platform's queue: a poll from `id + 1` confirms it.
    pub id: u64,
    /// The message.
    pub delivery: Delivery,
}

/// The body of a webhook delivery, from the load generator to a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// The chat number.
    pub chat: u32,
    /// The message's number within its chat, from 0.
    pub seq: u32,
    /// What the user typed.
    pub body: String,
}

/// A reply the bot sends: its text names the message it answers and the turn it ran under.
///
/// The text is `r<seq> <kind> f<fence>`, so the platform can tell which message each send
/// belongs to and which holder sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The message it answers.
    pub seq: u32,
    /// What the bot did with it: `echo`, `q1`, `q2` or `done`.
    pub kind: String,
    /// The fence of the turn it was sent under.
    pub fence: u64,
}

impl Reply {
    /// The text of the reply.
    pub fn text(&self) -> String {
        format!("r{} {} f{}", self.seq, self.kind, self.fence)
    }

    /// Reads a reply back from its text.
    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split(' ');
        let seq = words.next()?.strip_prefix('r')?.parse().ok()?;
        let kind = words.next()?.to_owned();
        let fence = words.next()?.strip_prefix('f')?.parse().ok()?;
        Some(Self { seq, kind, fence })
    }
}

/// A send as the fake platform API receives it from a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlatformSend {
    /// The replica that sent it.
    pub replica: String,
    /// The chat id.
    pub chat: String,
    /// The text.
    pub text: String,
}

/// One line of a replica's history file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Record {
    /// The process started (again, after a kill, under the same replica id).
    Started {
        /// The replica id.
        replica: String,
        /// When.
        t: u64,
    },
    /// The replica was granted the chat's turn with `fence`; `t` is when the grant arrived.
    Grant {
        /// The chat number.
        chat: u32,
        /// The replica id.
        replica: String,
        /// The turn's fence.
        fence: u64,
        /// The incarnations the grant passed over (see `TurnGrant::passed_over`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        passed: Vec<String>,
        /// When.
        t: u64,
    },
    /// The replica gave the chat's turn with `fence` back.
    Released {
        /// The chat number.
        chat: u32,
        /// The replica id.
        replica: String,
        /// The turn's fence.
        fence: u64,
        /// Whether anything happened under the turn.
        used: bool,
        /// Whether the holder handed unfinished work back.
        hand_back: bool,
        /// When.
        t: u64,
    },
    /// A handler took message `seq` of `chat` under the turn with `fence`.
    Handled {
        /// The chat number.
        chat: u32,
        /// The message number.
        seq: u32,
        /// What took it: `echo`, `form`, `a1` or `a2`.
        kind: String,
        /// The replica id.
        replica: String,
        /// The turn's fence.
        fence: u64,
        /// When.
        t: u64,
    },
    /// The transport was handed reply `seq` `kind` of `chat` under `fence`: the turn's check
    /// before the send had passed. `t` is when; the platform may receive it much later, when
    /// the process froze in between (see `check.rs`).
    Sending {
        /// The chat number.
        chat: u32,
        /// The message it answers.
        seq: u32,
        /// What kind of reply it is.
        kind: String,
        /// The turn's fence.
        fence: u64,
        /// The replica id.
        replica: String,
        /// When.
        t: u64,
    },
    /// The replica took `count` tickets in `chat`'s queue in one call: each message of the
    /// chat it took in holds its place from here on, and its verdict follows at once. `t` is
    /// when the call returned.
    Ticketed {
        /// The chat number.
        chat: u32,
        /// The replica id.
        replica: String,
        /// How many tickets the call took.
        count: usize,
        /// When.
        t: u64,
    },
    /// The polling transport lets a poll of `session` go to the platform now: its session is
    /// still the replica's, as far as it can tell (`Intake::holds_transport`).
    Polling {
        /// The session.
        session: u64,
        /// The replica.
        replica: String,
        /// When.
        t: u64,
    },
    /// The bot took delivery of message `seq` of `chat`: the `200 OK` goes out now. `t` is
    /// when; the load generator may get it much later, when the process froze in between.
    Accepted {
        /// The chat number.
        chat: u32,
        /// The message number.
        seq: u32,
        /// The replica id.
        replica: String,
        /// When.
        t: u64,
    },
    /// Something the bot reported about a chat (a replay, a duplicate, a skipped send, an
    /// error), for reading a history by eye.
    Note {
        /// The chat number, when the event names one.
        chat: Option<u32>,
        /// The replica id.
        replica: String,
        /// The event, as debug text.
        text: String,
        /// When.
        t: u64,
    },
    /// A compare-and-set checkpoint write of the chat's flow landed. `t` is when it was issued.
    Checkpoint {
        /// The chat number.
        chat: u32,
        /// The replica id.
        replica: String,
        /// The revision the write created, or 0 for a clear.
        revision: u64,
        /// When the write was issued.
        t: u64,
    },
}

/// An append-only history file. Each record is one `write` on a file opened for appending, so
/// a process killed with SIGKILL leaves every record it finished writing, whole.
#[derive(Debug)]
pub struct History {
    file: Option<Mutex<File>>,
}

impl History {
    /// Opens (or creates) the history file at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file: Some(Mutex::new(file)) })
    }

    /// A history that keeps nothing, for a replica run outside the harness.
    pub fn discard() -> Self {
        Self { file: None }
    }

    /// Appends a record.
    pub fn write(&self, record: &Record) {
        let Some(file) = &self.file else { return };
        let Ok(mut line) = serde_json::to_vec(record) else { return };
        line.push(b'\n');
        let mut file = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(&line) {
            tracing::error!(error = %e, "writing the history failed");
        }
    }
}

/// Reads every record of a history file; a line cut short by a kill is skipped.
pub fn read_history(path: &Path) -> std::io::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_back_from_its_text() {
        let reply = Reply { seq: 17, kind: "q2".to_owned(), fence: 40 };
        assert_eq!(Reply::parse(&reply.text()), Some(reply));
        assert_eq!(Reply::parse("hello"), None);
    }

    #[test]
    fn a_message_id_reads_back() {
        assert_eq!(parse_message_id(&message_id(3, 12)), Some((3, 12)));
        assert_eq!(parse_message_id("x-1"), None);
    }
}
