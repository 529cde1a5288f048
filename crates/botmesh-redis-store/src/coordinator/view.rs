//! The cluster view of [`Coordinator::cluster`]: each replica's status document (kept in one
//! sorted index under one hash tag, scored by when its keep ends) and the holder of each
//! leadership asked about.

use std::time::Duration;

use botmesh_traits::{ClusterView, Coordinator, Error, LeaderEntry, ReplicaEntry, Result};
use futures_util::future::join_all;

use super::{RedisCoordinator, unavailable};
use crate::conn::{idempotent, ms};
use crate::keys::{KeyLayout, Keys};
use crate::scripts;

impl RedisCoordinator {
    /// One script on the status keys' tag, on the heartbeat connection (the heartbeat loop
    /// calls it): the document, its index entry and the trim of the entries whose keep ended,
    /// all by the server's clock. The index is scored by the end of each entry's keep, so
    /// documents kept for different times are trimmed exactly. Sent again once if the
    /// connection dropped (publishing twice is harmless).
    pub(super) async fn publish(&self, status: &str, keep: Duration) -> Result<()> {
        let conn = self.heartbeat_conn().await?;
        let doc = format!("{}{}", self.keys.replica_doc_prefix(), self.incarnation);
        let mut invocation = scripts::PUBLISH_STATUS.get().prepare_invoke();
        invocation
            .key(self.keys.replica_index())
            .key(doc)
            .arg(&self.incarnation)
            .arg(&self.replica_id)
            .arg(status)
            .arg(ms(keep));
        let invocation = &invocation;
        idempotent(|| {
            let mut conn = conn.clone();
            async move { invocation.invoke_async::<()>(&mut conn).await }
        })
        .await
        .map_err(|e| unavailable("publishing the replica's status", e))
    }

    /// In the standalone layout every key is on one slot: one script reads the documents,
    /// their liveness and the leadership hashes, one round trip. In the cluster layout, two
    /// rounds: the script on the status keys' tag and, at the same time, the script on each
    /// leadership's shard (its hash and its holder's liveness, as `try_lead` reads them); then
    /// the listed incarnations' liveness keys, concurrently.
    pub(super) async fn view(&self, leaderships: &[String]) -> Result<ClusterView> {
        let index = self.keys.replica_index();
        let docs = self.keys.replica_doc_prefix();
        let (replicas, leaders) = match self.keys.layout() {
            KeyLayout::Standalone => {
                let mut keys: Vec<String> =
                    leaderships.iter().map(|name| self.keys.lead(name)).collect();
                keys.push(index);
                // One tag for every key in this layout, whatever the id.
                let alive = Keys::alive_prefix(&self.keys.shard(""));
                let (replicas, leaders) = self.read_cluster(&keys, &alive, &docs).await?;
                (replica_entries(&replicas)?, leader_entries(&leaders, leaderships)?)
            }
            KeyLayout::Cluster => {
                let reads = leaderships.iter().map(|name| async move {
                    let alive = Keys::alive_prefix(&self.keys.shard(name));
                    self.read_cluster(&[self.keys.lead(name)], &alive, "").await
                });
                let (replicas, held) = tokio::join!(
                    self.read_cluster(std::slice::from_ref(&index), "", &docs),
                    join_all(reads)
                );
                let mut leaders = Vec::new();
                for (name, read) in leaderships.chunks(1).zip(held) {
                    leaders.extend(leader_entries(&read?.1, name)?);
                }
                (replica_entries(&replicas?.0)?, leaders)
            }
        };
        let checks = replicas.iter().map(|(entry, unread)| async move {
            match unread {
                true => self.is_alive(&entry.incarnation).await,
                false => Ok(entry.alive),
            }
        });
        let alive = join_all(checks).await;
        let mut entries = Vec::with_capacity(replicas.len());
        for ((mut entry, _), alive) in replicas.into_iter().zip(alive) {
            entry.alive = alive?;
            entries.push(entry);
        }
        Ok(ClusterView::new(entries, leaders))
    }

    /// One run of the cluster script over `keys` (see [`scripts::CLUSTER`]): its replica rows
    /// and its leader rows, flat.
    async fn read_cluster(
        &self,
        keys: &[String],
        alive_prefix: &str,
        doc_prefix: &str,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut invocation = scripts::CLUSTER.get().prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        invocation.arg(alive_prefix).arg(doc_prefix);
        let invocation = &invocation;
        idempotent(|| async move { invocation.invoke_async(&mut self.conn()).await })
            .await
            .map_err(|e| unavailable("reading the cluster view", e))
    }
}

/// The rows of `flat`, each `N` fields long.
fn rows<const N: usize>(flat: &[String], what: &str) -> Result<Vec<[String; N]>> {
    let chunks = flat.chunks_exact(N);
    if !chunks.remainder().is_empty() {
        return Err(Error::corrupt(format!("{what} rows"), format!("{flat:?}")));
    }
    Ok(chunks.map(|c| std::array::from_fn(|i| c[i].clone())).collect())
}

/// A liveness flag the script read: `None` when it could not (the key lives in another slot).
fn liveness(flag: &str) -> Option<bool> {
    match flag {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// The replica rows of the cluster script: `(entry, whether its liveness is still to read)`.
fn replica_entries(flat: &[String]) -> Result<Vec<(ReplicaEntry, bool)>> {
    rows::<5>(flat, "replica")?
        .into_iter()
        .map(|[incarnation, replica, status, age, alive]| {
            let age = age.parse::<u64>().map_err(|e| Error::corrupt(format!("age {age:?}"), e))?;
            let entry = ReplicaEntry::new(
                replica,
                incarnation,
                liveness(&alive).unwrap_or(false),
                Duration::from_millis(age),
                status,
            );
            Ok((entry, liveness(&alive).is_none()))
        })
        .collect()
}

/// The leader rows of one run of the cluster script over the hashes of `names`, in order.
fn leader_entries(flat: &[String], names: &[String]) -> Result<Vec<LeaderEntry>> {
    rows::<5>(flat, "leader")?
        .into_iter()
        .map(|[position, incarnation, replica, fence, alive]| {
            let name = position
                .parse::<usize>()
                .ok()
                .and_then(|n| names.get(n.checked_sub(1)?))
                .ok_or_else(|| Error::corrupt("leader row", format!("position {position:?}")))?;
            let fence =
                fence.parse::<u64>().map_err(|e| Error::corrupt(format!("fence {fence:?}"), e))?;
            let alive = liveness(&alive)
                .ok_or_else(|| Error::corrupt("leader row", "liveness not read"))?;
            Ok(LeaderEntry::new(name.clone(), replica, incarnation, fence, alive))
        })
        .collect()
}
