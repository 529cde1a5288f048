//! What the status page shows, as one value: this replica, its health, and the cluster.

use botmesh_core::Bot;
use botmesh_core::status::{Cluster, Health, ReplicaStatus};
use serde::{Deserialize, Serialize};

/// The data of the status page, as `/status.json` serves it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Snapshot {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub generated_at_ms: u64,
    /// The replica that serves the page, as it reports itself now.
    pub replica: ReplicaStatus,
    /// Its health.
    pub health: Health,
    /// The cluster as the coordination backend sees it; `None` without coordination or when
    /// the backend could not be read (see `cluster_error`).
    pub cluster: Option<Cluster>,
    /// Why the cluster could not be read: the error's label, without details that could
    /// carry a secret.
    pub cluster_error: Option<String>,
}

impl Snapshot {
    /// Takes a snapshot of `bot`: one read of the coordination backend.
    pub async fn of(bot: &Bot) -> Self {
        let coordinated = bot.status().coordination.is_some();
        let (cluster, cluster_error) = if coordinated {
            match bot.cluster().await {
                Ok(cluster) => (Some(cluster), None),
                Err(e) => (None, Some(e.label().to_owned())),
            }
        } else {
            (None, None)
        };
        Self {
            generated_at_ms: now_ms(),
            replica: bot.status(),
            health: bot.health(),
            cluster,
            cluster_error,
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
