//! What the checker reads: the load generator's and the platform's accounts of the run, the
//! replicas' histories, and the faults injected.

use serde::{Deserialize, Serialize};

use crate::record::Record;

/// A message the load generator got a `200 OK` for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Acked {
    /// The chat number.
    pub chat: u32,
    /// The message number.
    pub seq: u32,
    /// The replica that acknowledged it.
    pub replica: String,
    /// When the acknowledgement came back.
    pub t: u64,
}

/// A send the fake platform received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sent {
    /// The chat number.
    pub chat: u32,
    /// The message it answers.
    pub seq: u32,
    /// What kind of reply it is.
    pub kind: String,
    /// The fence of the turn it was sent under.
    pub fence: u64,
    /// The replica that sent it.
    pub replica: String,
    /// When the platform received it.
    pub t: u64,
    /// The idempotency key it carried, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The kinds of fault the harness injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL a replica, then start it again under the same replica id.
    Kill,
    /// SIGSTOP a replica past its lease, then SIGCONT.
    Stop,
    /// `CLIENT KILL` every client connection of the replicas.
    ClientKill,
    /// Freeze Redis for a while (SIGSTOP, then SIGCONT).
    Pause,
    /// Restart Redis empty: outside the guarantees.
    Restart,
    /// Starve a replica of CPU for a while, as a noisy neighbour does: short SIGSTOPs with
    /// shorter runs between them.
    Starve,
    /// Fail Redis over to its replica through Sentinel: by `SENTINEL FAILOVER`, or by killing
    /// the master outright. Replication is asynchronous, so what the master had not passed on
    /// yet is lost: inside the guarantees only when grants wait for the replica
    /// (`--wait-replicas on`).
    Failover,
}

impl FaultKind {
    /// Every kind, in the order the harness cycles through them.
    pub const ALL: [Self; 7] = [
        Self::Kill,
        Self::Stop,
        Self::ClientKill,
        Self::Pause,
        Self::Restart,
        Self::Starve,
        Self::Failover,
    ];

    /// The kind's name on the command line and in the report.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
            Self::ClientKill => "client-kill",
            Self::Pause => "pause",
            Self::Restart => "restart",
            Self::Starve => "starve",
            Self::Failover => "failover",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A fault as it was injected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    /// What was done.
    pub kind: FaultKind,
    /// The replica it hit, for kill and stop.
    pub replica: Option<String>,
    /// When it began, in ms since the run started.
    pub at_ms: u64,
    /// How long it lasted (until the restart, the SIGCONT), in ms.
    pub lasted_ms: u64,
    /// When it began, on the monotonic clock.
    pub t: u64,
    /// When it ended, on the monotonic clock.
    pub t_end: u64,
    /// For a starve: each stop of the replica, from its SIGSTOP to its SIGCONT.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<(u64, u64)>,
}

impl Fault {
    /// When the replica it hit was stopped, if it was: once for a stop, at each burst of a
    /// starve.
    pub fn stops(&self) -> Vec<u64> {
        match self.kind {
            FaultKind::Stop => vec![self.t],
            FaultKind::Starve => self.bursts.iter().map(|b| b.0).collect(),
            _ => Vec::new(),
        }
    }
}

/// A session of the polling transport, as the platform saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    /// The platform's number for it, from 1 in the order sessions opened.
    pub id: u64,
    /// The replica that opened it.
    pub replica: String,
    /// When it opened.
    pub opened: u64,
    /// When its replica closed it, if it did (a killed replica never does).
    pub closed: Option<u64>,
}

/// A poll of the polling transport, from its arrival at the platform to its answer (or its
/// connection's end).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Polled {
    /// The session that polled.
    pub session: u64,
    /// Its replica.
    pub replica: String,
    /// When it arrived.
    pub start: u64,
    /// When it ended.
    pub end: u64,
}

/// Everything the checker reads.
#[derive(Debug, Default)]
pub struct Run {
    /// What the load generator sent: every message number of every chat it got an
    /// acknowledgement for.
    pub acked: Vec<Acked>,
    /// What the platform received.
    pub sent: Vec<Sent>,
    /// Every replica's history.
    pub history: Vec<Record>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// The polling transport's sessions.
    pub sessions: Vec<Session>,
    /// The polling transport's polls.
    pub polls: Vec<Polled>,
    /// The lease the replicas ran with, in ms.
    pub lease_ms: u64,
    /// Whether durability was on.
    pub durability: bool,
    /// Whether grants waited for Redis's replica (`WAIT`): failovers are then inside the
    /// guarantees.
    pub wait_replicas: bool,
    /// When the run started, on the monotonic clock.
    pub t0: u64,
}
