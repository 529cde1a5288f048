//! What a replica tells operators about itself and about the replicas it runs with: the data
//! behind health probes and a status page (`botmesh-ops` serves both).
//!
//! Every type here is plain data that serializes to JSON, and reads back with defaults for
//! fields it does not know, so replicas of two versions read each other during a rolling
//! deploy. Nothing here carries a message's content or a secret: chats appear by key, errors
//! by their [`label`](crate::BotError::label).

use serde::{Deserialize, Serialize};

/// One replica as it reports itself: [`Bot::status`](crate::Bot::status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ReplicaStatus {
    /// The replica's id under coordination; `None` for a bot of one process.
    pub replica_id: Option<String>,
    /// This process's incarnation: the owner of what it journals.
    pub incarnation: String,
    /// Whether the bot is started and not stopping.
    pub running: bool,
    /// Milliseconds since the bot started (0 while stopped).
    pub uptime_ms: u64,
    /// Messages (and takeovers) queued on this replica's chats and not finished.
    pub queue_depth: usize,
    /// Conversations live in this replica's memory.
    pub conversations: usize,
    /// Journal writes waiting in the repair queue.
    pub journal_backlog: usize,
    /// Outbox sends not settled yet.
    pub outbox_backlog: usize,
    /// The bot's providers and their transports here.
    pub transports: Vec<TransportState>,
    /// The replica's coordination, when it runs under one.
    pub coordination: Option<CoordinationStatus>,
    /// The latest notable events here (transport changes, leadership, hand-overs, takeovers,
    /// lost leases, errors), newest first.
    pub recent: Vec<Recent>,
}

/// A provider's transport on one replica.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct TransportState {
    /// The provider id.
    pub provider: String,
    /// Whether it holds an exclusive session (elected among replicas).
    pub exclusive: bool,
    /// Whether its transport runs on this replica.
    pub running: bool,
    /// Whether its transport is open (connected, or serving webhooks).
    pub open: bool,
}

/// A replica's coordination: its lease, the turns it holds, the transports it leads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CoordinationStatus {
    /// The replica's id.
    pub replica_id: String,
    /// Its heartbeat lease, in milliseconds.
    pub lease_ms: u64,
    /// Milliseconds since the last heartbeat that renewed the lease.
    pub renewed_ms_ago: u64,
    /// Milliseconds since the heartbeat loop last ran (renewal or not): its liveness.
    pub heartbeat_loop_ms_ago: u64,
    /// Whether the replica gave its leases up locally (no renewal for too long).
    pub stalled: bool,
    /// Whether it stepped down from its transports (a transport that stayed down).
    pub stepped_down: bool,
    /// Whether turn wake-ups reach it as they happen (see
    /// [`Coordinator::subscribed`](botmesh_traits::Coordinator::subscribed)); while not, its
    /// waiting messages poll, and it is not ready.
    pub subscribed: bool,
    /// How many chat turns it holds.
    pub turns_held: usize,
    /// The turns held longest, oldest first (at most [`CoordinationStatus::TURNS_SHOWN`]).
    pub oldest_turns: Vec<HeldTurn>,
    /// The exclusive transports it leads.
    pub leading: Vec<Leading>,
}

impl CoordinationStatus {
    /// How many held turns a status lists.
    pub const TURNS_SHOWN: usize = 20;
}

/// A chat turn a replica holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct HeldTurn {
    /// The chat key.
    pub chat: String,
    /// The turn's fence.
    pub fence: u64,
    /// Milliseconds it has been held.
    pub held_ms: u64,
}

/// A leadership a replica holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Leading {
    /// The role: `provider:<id>` for an exclusive transport.
    pub name: String,
    /// Its fence.
    pub fence: u64,
}

/// A notable event, as a status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Recent {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What: `transport`, `leader`, `follower`, `takeover`, `handoff`, `lease_lost`,
    /// `error`, `started`, `stopped`, `warning`.
    pub kind: String,
    /// The chat it concerns, if one.
    pub chat: Option<String>,
    /// A short description without content: a provider and its status, a role and its
    /// fence, an outcome, an error's label.
    pub detail: String,
}

/// Whether a replica is alive and ready: [`Bot::health`](crate::Bot::health).
///
/// ```
/// use botmesh_core::Bot;
/// # use botmesh_testing::TestProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bot = Bot::builder().provider(TestProvider::new()).build()?;
/// assert!(!bot.health().ready, "not running yet");
/// bot.start().await?;
/// let health = bot.health();
/// assert!(health.live && health.ready, "{:?}", health.reasons);
/// # bot.stop().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Health {
    /// The process runs and, under coordination, its heartbeat loop does. A liveness probe
    /// that fails restarts the process: this does not depend on the backend being reachable.
    pub live: bool,
    /// The replica can take traffic: running, its leases fresh, and each exclusive transport
    /// either led here (and open) or ready to be taken over.
    pub ready: bool,
    /// Why it is not live or not ready; empty when it is both.
    pub reasons: Vec<String>,
}

/// The replicas as the coordination backend sees them: [`Bot::cluster`](crate::Bot::cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Cluster {
    /// The incarnation of the replica that looked.
    pub observer: String,
    /// Every replica whose status the backend still keeps, alive or not, by replica id.
    pub replicas: Vec<ClusterReplica>,
    /// The current leader of each exclusive transport that has one.
    pub leaders: Vec<ClusterLeader>,
}

/// One replica in a [`Cluster`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ClusterReplica {
    /// Its replica id.
    pub replica_id: String,
    /// Its incarnation.
    pub incarnation: String,
    /// Whether its heartbeat lease still runs.
    pub alive: bool,
    /// Milliseconds since it last published its status.
    pub published_ms_ago: u64,
    /// The status it published; `None` when it could not be read (another version's).
    pub status: Option<ReplicaStatus>,
}

/// The leader of one exclusive transport in a [`Cluster`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ClusterLeader {
    /// The provider id of the transport.
    pub transport: String,
    /// The leading replica's id.
    pub replica_id: String,
    /// Its incarnation.
    pub incarnation: String,
    /// The leadership's fence.
    pub fence: u64,
    /// Whether the leader's heartbeat lease still runs (a dead leader keeps the role until a
    /// standby takes it).
    pub alive: bool,
}
