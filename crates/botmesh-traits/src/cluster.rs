//! A read-only view of the replicas sharing a coordination backend, for an operator's status
//! page: what each replica published about itself, whether it is alive, and who holds the
//! leaderships asked about.
//!
//! Replicas publish with [`Coordinator::publish_status`](crate::Coordinator::publish_status)
//! from their heartbeat loop; anyone reads the view with
//! [`Coordinator::cluster`](crate::Coordinator::cluster).

use std::time::Duration;

/// One replica incarnation as the backend keeps it, from its last
/// [`publish_status`](crate::Coordinator::publish_status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaEntry {
    /// The replica's id.
    pub replica_id: String,
    /// The incarnation that published (a replica restarted with the same id is another one).
    pub incarnation: String,
    /// Whether its heartbeat lease still runs, as
    /// [`is_alive`](crate::Coordinator::is_alive) would say. A dead incarnation is listed
    /// until its document's keep runs out.
    pub alive: bool,
    /// How long ago it last published, by the backend's clock.
    pub age: Duration,
    /// The document it published. Opaque to the backend; the runtime writes JSON.
    pub status: String,
}

impl ReplicaEntry {
    /// An entry.
    pub fn new(
        replica_id: impl Into<String>,
        incarnation: impl Into<String>,
        alive: bool,
        age: Duration,
        status: impl Into<String>,
    ) -> Self {
        Self {
            replica_id: replica_id.into(),
            incarnation: incarnation.into(),
            alive,
            age,
            status: status.into(),
        }
    }
}

/// The holder of a leadership (see [`Coordinator::try_lead`](crate::Coordinator::try_lead)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderEntry {
    /// The leadership's name, such as `provider:<id>`.
    pub name: String,
    /// The holder's replica id.
    pub replica_id: String,
    /// The holder's incarnation.
    pub incarnation: String,
    /// The fence the holder got with the leadership.
    pub fence: u64,
    /// Whether the holder's heartbeat lease still runs. A dead holder keeps the name until
    /// another replica takes it.
    pub alive: bool,
}

impl LeaderEntry {
    /// An entry.
    pub fn new(
        name: impl Into<String>,
        replica_id: impl Into<String>,
        incarnation: impl Into<String>,
        fence: u64,
        alive: bool,
    ) -> Self {
        Self {
            name: name.into(),
            replica_id: replica_id.into(),
            incarnation: incarnation.into(),
            fence,
            alive,
        }
    }
}

/// What [`Coordinator::cluster`](crate::Coordinator::cluster) returns: the replicas whose
/// status document is still kept, and the holders of the leaderships asked about.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use botmesh_traits::{ClusterView, LeaderEntry, ReplicaEntry};
///
/// let view = ClusterView::new(
///     vec![
///         ReplicaEntry::new("pod-2", "9f1c", true, Duration::from_secs(1), "{}"),
///         ReplicaEntry::new("pod-1", "3e7a", false, Duration::from_secs(40), "{}"),
///     ],
///     vec![LeaderEntry::new("provider:telegram", "pod-2", "9f1c", 17, true)],
/// );
/// assert_eq!(view.replicas[0].replica_id, "pod-1", "sorted by replica id");
/// assert_eq!(view.leader("provider:telegram").map(|l| l.fence), Some(17));
/// assert!(view.replica("3e7a").is_some_and(|r| !r.alive));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterView {
    /// Every replica incarnation whose document is still kept, alive or not, sorted by
    /// replica id, then incarnation.
    pub replicas: Vec<ReplicaEntry>,
    /// The holders of the names asked for, in the order asked; a name nobody holds is left
    /// out.
    pub leaders: Vec<LeaderEntry>,
}

impl ClusterView {
    /// A view of `replicas`, which it sorts by replica id, then incarnation, and `leaders`,
    /// kept in the order given.
    pub fn new(mut replicas: Vec<ReplicaEntry>, leaders: Vec<LeaderEntry>) -> Self {
        replicas.sort_by(|a, b| {
            (a.replica_id.as_str(), a.incarnation.as_str())
                .cmp(&(b.replica_id.as_str(), b.incarnation.as_str()))
        });
        Self { replicas, leaders }
    }

    /// The entry of `incarnation`, if its document is kept.
    pub fn replica(&self, incarnation: &str) -> Option<&ReplicaEntry> {
        self.replicas.iter().find(|r| r.incarnation == incarnation)
    }

    /// The holder of `name`, if it was asked for and has one.
    pub fn leader(&self, name: &str) -> Option<&LeaderEntry> {
        self.leaders.iter().find(|l| l.name == name)
    }
}
