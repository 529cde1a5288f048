//! What one replica holds in the coordination backend, shared by the runtime, its loops and
//! the turns it hands out: its lease (when it was last renewed, the stall rule), the turns it
//! holds, and the transport leaderships it won.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_core::coordination::{Host, Turn};
use botmesh_core::retry;
use botmesh_core::traits::{
    ChatKey, Error, Leadership, LeaseLostReason, ReleaseOptions, TurnGrant, async_trait,
};
use botmesh_core::{Event, FollowReason};
use metrics::Gauge;
use tokio::time::Instant;

use crate::metered::Metered;
use crate::turns::Grants;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The critical sections below hold no user code and do not panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by the runtime, its loops and the turns it hands out.
pub(crate) struct State {
    pub(crate) coordinator: Metered,
    pub(crate) replica_id: String,
    pub(crate) lease: Duration,
    /// Past this long without a successful renewal, leases are given up locally.
    pub(crate) stall_after: Duration,
    /// When the last successful heartbeat was sent.
    pub(crate) renewed_at: Mutex<Instant>,
    /// When the leases were last given up locally.
    pub(crate) given_up_at: Mutex<Option<Instant>>,
    /// Bumped when this replica gives its leases up locally: turns from an older epoch are lost.
    pub(crate) epoch: AtomicU64,
    /// The turns held now, by chat key.
    pub(crate) held: Mutex<HashMap<ChatKey, Hold>>,
    /// How many turns are held, as a gauge.
    pub(crate) turns_held: Gauge,
    /// When the heartbeat loop last ran, renewal or not: the replica's liveness.
    pub(crate) looped_at: Mutex<Instant>,
    /// Releases that failed on the wire (with whether the turn was used), retried by the
    /// heartbeat loop.
    pub(crate) unreleased: Mutex<Vec<(TurnGrant, ReleaseOptions)>>,
    /// The transport leaderships held now, by provider id.
    pub(crate) leading: Mutex<HashMap<String, Leadership>>,
    /// Per provider, the lock of [`State::transport_lock`].
    pub(crate) transports: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Resignations the backend did not confirm, by provider id: retried before campaigning
    /// again.
    pub(crate) unresigned: Mutex<HashMap<String, Leadership>>,
    /// Taken by each campaign pass, so that this replica's campaigns for several transports
    /// see each other's outcome (see `election.rs`).
    pub(crate) campaign: tokio::sync::Mutex<()>,
    pub(crate) host: Mutex<Option<Arc<dyn Host>>>,
    pub(crate) stopping: AtomicBool,
    /// Set by a step-down before stopping: no more campaigning, heartbeats go on.
    pub(crate) stepped_down: AtomicBool,
}

/// A turn this replica holds.
pub(crate) struct Hold {
    pub(crate) grant: TurnGrant,
    /// Its loss was reported already.
    pub(crate) reported: bool,
    /// Since when.
    pub(crate) since: Instant,
}

impl State {
    /// Records a turn granted now.
    pub(crate) fn hold(&self, grant: TurnGrant) {
        let mut held = lock(&self.held);
        let key = grant.key.clone();
        held.insert(key, Hold { grant, reported: false, since: Instant::now() });
        self.turns_held.set(held.len() as f64);
    }

    /// Forgets a turn given back; `None` when it was not held.
    pub(crate) fn unhold(&self, key: &ChatKey) -> Option<TurnGrant> {
        let mut held = lock(&self.held);
        let hold = held.remove(key)?;
        self.turns_held.set(held.len() as f64);
        Some(hold.grant)
    }

    pub(crate) fn host(&self) -> Option<Arc<dyn Host>> {
        lock(&self.host).clone()
    }

    pub(crate) fn emit(&self, event: Event) {
        if let Some(host) = self.host() {
            host.emit(event);
        }
    }

    /// Whether the leases can no longer be trusted: the last renewal is too old.
    pub(crate) fn stalled(&self) -> bool {
        lock(&self.renewed_at).elapsed() > self.stall_after
    }

    /// Gives every lease up locally: held turns become lost, the transport stops at once.
    /// Called again while the replica stays stalled, it reports only the turns taken since:
    /// one loss is one event.
    pub(crate) fn give_up(self: &Arc<Self>, reason: LeaseLostReason) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        *lock(&self.given_up_at) = Some(Instant::now());
        let newly_lost: Vec<ChatKey> = lock(&self.held)
            .iter_mut()
            .filter(|(_, hold)| !hold.reported)
            .map(|(key, hold)| {
                hold.reported = true;
                key.clone()
            })
            .collect();
        for key in newly_lost {
            self.emit(Event::LeaseLost { key, reason });
        }
        let lost: Vec<(String, Leadership)> = lock(&self.leading).drain().collect();
        for (provider, lead) in lost {
            self.emit(Event::Follower { name: lead.name, reason: FollowReason::Lost });
            // Stopped now, not at the election loop's next pass: the lease may expire in the
            // backend within a third of it, and a standby start the transport then.
            let state = Arc::clone(self);
            tokio::spawn(async move {
                let Some(host) = state.host() else { return };
                let serial = state.transport_lock(&provider);
                let _serial = serial.lock().await;
                if lock(&state.leading).contains_key(&provider) {
                    // Won back meanwhile (a renewal landed): the transport stays.
                    return;
                }
                if let Err(e) = host.stop_transport(&provider).await {
                    tracing::warn!(target: "botmesh", provider, error = %e, "stopping the transport after losing its lease");
                }
            });
        }
    }

    /// Held while `provider`'s transport is started or stopped for its leadership, so a stop
    /// after the leadership was given up can never be overtaken by a start for it. One lock
    /// per transport: a slow start of one never delays the stop of another.
    pub(crate) fn transport_lock(&self, provider: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.transports);
        Arc::clone(locks.entry(provider.to_owned()).or_default())
    }

    /// Whether the leadership `lead` of `provider`'s transport is still this replica's (not
    /// given up since).
    pub(crate) fn leads(&self, provider: &str, lead: &Leadership) -> bool {
        lock(&self.leading).get(provider).is_some_and(|l| l.fence == lead.fence)
    }

    /// Whether campaigning is over: the bot stops, or stepped down before stopping.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst) || self.stepped_down.load(Ordering::SeqCst)
    }

    /// Gives every transport leadership up on purpose (the bot stops).
    pub(crate) async fn resign_all(&self) {
        let leads: Vec<Leadership> = lock(&self.leading).drain().map(|(_, l)| l).collect();
        for lead in leads {
            self.emit(Event::Follower { name: lead.name.clone(), reason: FollowReason::Stopping });
            if let Err(e) = self.coordinator.resign(&lead).await {
                tracing::warn!(target: "botmesh", error = %e, "resigning failed; the lease will expire");
            }
        }
    }
}

#[async_trait]
impl Grants for State {
    /// When this replica last gave its leases up because it stalled, if it ever did. Its
    /// queued tickets may have been passed over since, and their messages taken over by
    /// another replica.
    fn given_up_at(&self) -> Option<Instant> {
        *lock(&self.given_up_at)
    }

    /// Gives a turn back. A dropped connection is ridden out at once; a longer outage goes to
    /// the heartbeat loop, which retries within `lease / 3`.
    async fn release(&self, turn: &Arc<dyn Turn>, options: ReleaseOptions) {
        let Some(grant) = self.unhold(turn.key()) else { return };
        if options.hand_back {
            metrics::counter!(botmesh_core::telemetry::HANDBACKS).increment(1);
        }
        let released =
            retry::within(self.lease / 6, || self.coordinator.release_turn_with(&grant, &options));
        if let Err(e) = released.await {
            tracing::warn!(target: "botmesh", key = %turn.key(), error = %e, "release failed; retrying within lease / 3");
            lock(&self.unreleased).push((grant, options));
        }
    }

    /// Gives a turn back with journaled message `id` acknowledged in the same backend call,
    /// when the backend writes the journal (see `TurnJournal`). Tried once: after a failure,
    /// or when the backend has nothing to save, the turn is still held, for
    /// [`release`](Grants::release) beside the journal's own acknowledgement.
    async fn release_acknowledging(
        &self,
        turn: &Arc<dyn Turn>,
        options: ReleaseOptions,
        id: &str,
    ) -> bool {
        let Some(journal) = self.coordinator.turn_journal() else { return false };
        let Some(grant) = lock(&self.held).get(turn.key()).map(|hold| hold.grant.clone()) else {
            return false;
        };
        match journal.release_turn_acknowledging(&grant, &options, id).await {
            Ok(Some(_)) => {
                self.unhold(turn.key());
                if options.hand_back {
                    metrics::counter!(botmesh_core::telemetry::HANDBACKS).increment(1);
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                // Both are written again apart, which is safe (see `TurnJournal`).
                tracing::debug!(target: "botmesh", key = %turn.key(), error = %e, "release with acknowledgement failed; writing them apart");
                false
            }
        }
    }
}

/// A turn held by this replica.
pub(crate) struct OurTurn {
    pub(crate) key: ChatKey,
    pub(crate) grant: TurnGrant,
    pub(crate) epoch: u64,
    pub(crate) state: Arc<State>,
}

impl Turn for OurTurn {
    fn key(&self) -> &ChatKey {
        &self.key
    }

    fn fence(&self) -> u64 {
        self.grant.fence
    }

    fn check(&self) -> Result<(), Error> {
        let lost =
            || Error::LeaseLost { key: self.key.to_string(), reason: LeaseLostReason::Stalled };
        if self.state.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(lost());
        }
        if self.state.stalled() {
            // Noticed here first: the process was frozen and its heartbeat loop has not run.
            self.state.give_up(LeaseLostReason::Stalled);
            return Err(lost());
        }
        Ok(())
    }

    fn changed_hands(&self) -> bool {
        self.grant.previous_holder.as_deref() != Some(self.state.replica_id.as_str())
    }

    fn passed_over(&self) -> &[String] {
        &self.grant.passed_over
    }
}
