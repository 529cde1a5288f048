//! What a running bot tells operators: its status, its health, and the cluster of replicas as
//! the coordination backend sees it (see [`status`](crate::status) for the types).

use botmesh_traits::{Error, TransportStatus};

use crate::status::{
    Cluster, ClusterLeader, ClusterReplica, Health, ReplicaStatus, TransportState,
};
use crate::{Bot, Result};

/// The prefix of an exclusive transport's leadership name.
const PROVIDER_ROLE: &str = "provider:";

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Bot {
    /// This replica's status: what it queues and holds, its transports, its coordination, and
    /// its latest notable events. Cheap (no backend call); never carries a message's content.
    pub fn status(&self) -> ReplicaStatus {
        let shared = self.shared();
        let coordination = shared.coordination.as_ref().map(|c| c.status());
        let transports = shared
            .providers
            .iter()
            .map(|t| {
                let running = shared.providers.is_up(t);
                TransportState {
                    provider: t.id.to_string(),
                    exclusive: t.provider.capabilities().exclusive_session,
                    running,
                    open: running && t.provider.status() == TransportStatus::Open,
                }
            })
            .collect();
        ReplicaStatus {
            replica_id: coordination.as_ref().map(|c| c.replica_id.clone()),
            incarnation: shared.owner.clone(),
            running: self.running(),
            uptime_ms: self.started_at().map_or(0, |at| millis(at.elapsed())),
            queue_depth: self.queue_depth(),
            conversations: shared.meters.conversations.get(),
            journal_backlog: shared.repairs.backlog(),
            outbox_backlog: shared.meters.outbox_backlog.get(),
            transports,
            coordination,
            recent: shared.events.recent(),
        }
    }

    /// Whether this replica is alive and ready to take traffic, with the reasons when not: what
    /// liveness and readiness probes ask (`botmesh-ops` serves them).
    ///
    /// - **Live** while the process can make progress: under coordination, its heartbeat loop
    ///   ran within the lease. It does not depend on the backend answering, so a backend outage
    ///   does not restart every replica.
    /// - **Ready** when the bot runs, and under coordination its leases are fresh (renewed
    ///   within the lease, not stalled), and each exclusive transport is either led here and
    ///   open, or stood by for (this replica would take it over).
    pub fn health(&self) -> Health {
        let mut health = Health { live: true, ready: true, reasons: Vec::new() };
        let mut not_ready = |reason: String| {
            health.ready = false;
            health.reasons.push(reason);
        };
        let running = self.running();
        if !running {
            not_ready("the bot is not running".to_owned());
        }
        let shared = self.shared();
        let Some(coordination) = shared.coordination.as_ref().map(|c| c.status()) else {
            return health;
        };
        if running {
            if coordination.stalled {
                not_ready("its leases lapsed and are not renewed yet".to_owned());
            } else if coordination.renewed_ms_ago > coordination.lease_ms {
                not_ready(format!("no lease renewal for {} ms", coordination.renewed_ms_ago));
            }
            if !coordination.subscribed {
                not_ready("turn wake-ups are not subscribed".to_owned());
            }
            let exclusive =
                shared.providers.iter().filter(|t| t.provider.capabilities().exclusive_session);
            for transport in exclusive {
                let role = format!("{PROVIDER_ROLE}{}", transport.id);
                let leads = coordination.leading.iter().any(|l| l.name == role);
                let open = shared.providers.is_up(transport)
                    && transport.provider.status() == TransportStatus::Open;
                if leads && !open {
                    not_ready(format!("leads {} but its transport is not open", transport.id));
                } else if !leads && coordination.stepped_down {
                    not_ready(format!("stepped down from {}", transport.id));
                }
            }
        }
        if running && coordination.heartbeat_loop_ms_ago > coordination.lease_ms {
            health.live = false;
            health.reasons.push(format!(
                "the heartbeat loop has not run for {} ms",
                coordination.heartbeat_loop_ms_ago
            ));
        }
        health
    }

    /// The replicas as the coordination backend sees them: each one alive or recently gone,
    /// with the status it last published, and the leader of each exclusive transport. One
    /// read of the backend; `Unsupported` for a bot without coordination (see
    /// [`Bot::status`] for this replica alone).
    pub async fn cluster(&self) -> Result<Cluster> {
        let shared = self.shared();
        let Some(coordination) = &shared.coordination else {
            return Err(Error::Unsupported { op: "cluster" }.into());
        };
        let view = coordination.cluster().await?;
        let replicas = view
            .replicas
            .into_iter()
            .map(|entry| ClusterReplica {
                published_ms_ago: millis(entry.age),
                status: serde_json::from_str(&entry.status).ok(),
                replica_id: entry.replica_id,
                incarnation: entry.incarnation,
                alive: entry.alive,
            })
            .collect();
        let leaders = view
            .leaders
            .into_iter()
            .map(|entry| ClusterLeader {
                transport: entry.name.strip_prefix(PROVIDER_ROLE).unwrap_or(&entry.name).to_owned(),
                replica_id: entry.replica_id,
                incarnation: entry.incarnation,
                fence: entry.fence,
                alive: entry.alive,
            })
            .collect();
        Ok(Cluster { observer: shared.owner.clone(), replicas, leaders })
    }
}

/// Resolves on SIGTERM (what Kubernetes and Docker send to stop a container) or Ctrl-C: the
/// signal for [`Bot::run_until`]. On platforms without SIGTERM, on Ctrl-C alone.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No handler could be installed: wait for SIGTERM alone.
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
