//! The coordination runtime of one replica: the seam core calls, and the heartbeat loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::BotError;
use botmesh_core::coordination::{Coordination, Host, Journal, Own, Turn, TurnRun};
use botmesh_core::retry;
use botmesh_core::status::{CoordinationStatus, HeldTurn, Leading};
use botmesh_core::telemetry;
use botmesh_core::traits::{
    ChatKey, ClusterView, Coordinator, Error, InboxRecord, JournaledTicket, LeaseLostReason,
    ReleaseOptions, Ticket, TurnGrant, async_trait,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::election;
use crate::metered::Metered;
use crate::state::{Hold, OurTurn, State, lock};
use crate::turns::{self, Grants};
use crate::{CoordinationConfig, ProviderSession};

/// The runtime: implements the bot's [`Coordination`] over a coordination backend.
pub(crate) struct Runtime {
    state: Arc<State>,
    turn_wait: Duration,
    settle: Duration,
    provider_session: ProviderSession,
    provider_down: Duration,
    step_down_pause: Duration,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The leadership names of the transports elected here (`provider:<id>`), for the cluster
    /// view.
    elected: Mutex<Vec<String>>,
}

impl Runtime {
    pub(crate) fn new(cfg: CoordinationConfig) -> Self {
        let replica_id = cfg.coordinator.replica_id().to_owned();
        let lease = cfg.coordinator.lease();
        let coordinator = Metered::new(cfg.coordinator);
        Self {
            elected: Mutex::default(),
            state: Arc::new(State {
                coordinator,
                replica_id,
                lease,
                stall_after: lease * 2 / 3,
                renewed_at: Mutex::new(Instant::now()),
                given_up_at: Mutex::new(None),
                epoch: AtomicU64::new(0),
                held: Mutex::default(),
                turns_held: metrics::gauge!(telemetry::TURNS_HELD),
                looped_at: Mutex::new(Instant::now()),
                unreleased: Mutex::default(),
                leading: Mutex::default(),
                transports: Mutex::default(),
                unresigned: Mutex::default(),
                campaign: tokio::sync::Mutex::new(()),
                host: Mutex::new(None),
                stopping: AtomicBool::new(false),
                stepped_down: AtomicBool::new(false),
            }),
            turn_wait: cfg.turn_wait,
            settle: cfg.settle,
            provider_session: cfg.provider_session,
            provider_down: cfg.provider_down,
            step_down_pause: cfg.step_down_pause,
            tasks: Mutex::default(),
        }
    }
}

/// Renews the heartbeat every `lease / 3` (a failed renewal again within `lease / 24`), applies
/// the stall rule, and retries failed releases.
async fn heartbeat_loop(state: Arc<State>) {
    let period = state.lease / 3;
    // A renewal that failed (a dropped connection, a slow reply) is tried again this soon,
    // rather than a whole period later: a single blip must not cost every lease.
    let retry = (period / 8).max(Duration::from_millis(10));
    let mut wait = period;
    loop {
        tokio::time::sleep(wait).await;
        if state.stopping.load(Ordering::SeqCst) {
            return;
        }
        let started = Instant::now();
        *lock(&state.looped_at) = started;
        if started.duration_since(*lock(&state.renewed_at)) > state.stall_after {
            // This loop did not run for most of the lease (a frozen process, a blocked
            // runtime): the backend may have expired us already. Every turn granted before
            // now is suspect, held or about to be used.
            state.give_up(LeaseLostReason::Stalled);
        }
        let renewed =
            match tokio::time::timeout(period, state.coordinator.heartbeat(state.lease)).await {
                Ok(Ok(())) => true,
                Ok(Err(Error::LeaseLost { reason, .. })) => {
                    // Renewed, but only after our leases had run out in the backend.
                    state.give_up(reason);
                    true
                }
                Ok(Err(e)) => {
                    tracing::warn!(target: "botmesh", error = %e, "heartbeat failed");
                    false
                }
                Err(_) => {
                    tracing::warn!(target: "botmesh", "heartbeat timed out");
                    false
                }
            };
        let outcome = if renewed { "ok" } else { "error" };
        metrics::counter!(telemetry::LEASE_RENEWALS, "outcome" => outcome).increment(1);
        if renewed {
            *lock(&state.renewed_at) = started;
        }
        if state.stalled() {
            state.give_up(LeaseLostReason::Stalled);
        }
        if !renewed {
            wait = retry;
            continue;
        }
        wait = period;
        let unreleased: Vec<(TurnGrant, ReleaseOptions)> =
            std::mem::take(&mut *lock(&state.unreleased));
        for (grant, options) in unreleased {
            if state.coordinator.release_turn_with(&grant, &options).await.is_err() {
                lock(&state.unreleased).push((grant, options));
            }
        }
    }
}

/// Publishes the bot's status every `lease / 3` for the other replicas (and their status
/// pages) to read, kept long enough that a replica that died stays listed, as dead, for a
/// while. A backend without status publishing ends the loop at its first refusal.
async fn status_loop(state: Arc<State>) {
    let every = state.lease / 3;
    let keep = (state.lease * 4).max(Duration::from_secs(60));
    loop {
        if state.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Some(host) = state.host() {
            match serde_json::to_string(&host.status()) {
                Ok(doc) => {
                    match tokio::time::timeout(every, state.coordinator.publish_status(&doc, keep))
                        .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(Error::Unsupported { .. })) => return,
                        Ok(Err(e)) => {
                            tracing::debug!(target: "botmesh", error = %e, "publishing the status failed");
                        }
                        Err(_) => {
                            tracing::debug!(target: "botmesh", "publishing the status timed out");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "botmesh", error = %e, "the status did not serialize")
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Milliseconds as a status shows them.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl Coordination for Runtime {
    fn settle(&self) -> Duration {
        self.settle
    }

    fn incarnation(&self) -> String {
        self.state.coordinator.incarnation().to_owned()
    }

    async fn is_alive(&self, incarnation: &str) -> Result<bool, Error> {
        self.state.coordinator.is_alive(incarnation).await
    }

    async fn lead(&self, name: &str, lease: Duration) -> Result<bool, Error> {
        Ok(self.state.coordinator.try_lead(name, lease).await?.is_some())
    }

    async fn start(&self, host: Arc<dyn Host>) -> Result<(), BotError> {
        let state = &self.state;
        state.stopping.store(false, Ordering::SeqCst);
        state.stepped_down.store(false, Ordering::SeqCst);
        *lock(&state.host) = Some(Arc::clone(&host));
        let started = Instant::now();
        state.coordinator.heartbeat(state.lease).await?;
        *lock(&state.renewed_at) = started;
        *lock(&state.looped_at) = started;
        lock(&self.tasks).push(tokio::spawn(heartbeat_loop(Arc::clone(state))));
        lock(&self.tasks).push(tokio::spawn(status_loop(Arc::clone(state))));
        let (elected, shared): (Vec<_>, Vec<_>) =
            host.transports().into_iter().partition(|t| match self.provider_session {
                ProviderSession::Leader => true,
                ProviderSession::Shared => false,
                _ => t.exclusive,
            });
        for (i, transport) in shared.iter().enumerate() {
            if let Err(e) = host.start_transport(&transport.id).await {
                // Not started after all: nothing of this start keeps running.
                for started in &shared[..i] {
                    let _ = host.stop_transport(&started.id).await;
                }
                self.stop().await;
                return Err(e);
            }
        }
        *lock(&self.elected) = elected.iter().map(|t| format!("provider:{}", t.id)).collect();
        for transport in elected {
            let campaign = election::campaign(
                Arc::clone(state),
                Arc::clone(&host),
                transport.id,
                self.provider_down,
                self.step_down_pause,
            );
            lock(&self.tasks).push(tokio::spawn(campaign));
        }
        Ok(())
    }

    async fn step_down(&self) {
        self.state.stepped_down.store(true, Ordering::SeqCst);
        self.state.resign_all().await;
    }

    async fn stop(&self) {
        let state = &self.state;
        state.stopping.store(true, Ordering::SeqCst);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        state.resign_all().await;
        let retry: Vec<(TurnGrant, ReleaseOptions)> = std::mem::take(&mut *lock(&state.unreleased));
        for (grant, options) in retry {
            let _ = state.coordinator.release_turn_with(&grant, &options).await;
        }
    }

    fn stalled(&self) -> bool {
        self.state.stalled()
    }

    /// A dropped connection or a backend down for a while is ridden out: the call is tried
    /// again until the turn wait runs out, as the messages would have waited for their turn.
    async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>, Error> {
        let coordinator = &self.state.coordinator;
        retry::within(self.turn_wait, || coordinator.take_tickets(key, count)).await
    }

    fn journals(&self, place: &str) -> bool {
        self.state.coordinator.turn_journal().is_some_and(|journal| journal.place() == place)
    }

    /// Tried once: after a failure, the bot journals and takes the tickets apart, each with
    /// its own retries.
    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>, Error> {
        match self.state.coordinator.turn_journal() {
            Some(journal) => journal.take_tickets_journaling(key, records, retain).await,
            None => Err(Error::Unsupported { op: "take_tickets_journaling" }),
        }
    }

    async fn acquire(&self, mut ticket: Ticket) -> Result<Arc<dyn Turn>, Error> {
        let state = &self.state;
        // Taken before the wait: a stall noticed while waiting voids what the wait returns.
        let epoch = state.epoch.load(Ordering::SeqCst);
        let grant = match ticket.grant.take() {
            Some(grant) => grant,
            None => match state.coordinator.wait_turn(&ticket, self.turn_wait).await {
                Ok(grant) => grant,
                Err(e) => {
                    // The backend withdraws a ticket whose wait timed out; after any other
                    // failure, withdraw it ourselves so it does not hold up the chat.
                    let _ = state.coordinator.cancel_ticket(&ticket).await;
                    return Err(e);
                }
            },
        };
        let key = grant.key.clone();
        state.hold(grant.clone());
        Ok(Arc::new(OurTurn { key, grant, epoch, state: Arc::clone(state) }))
    }

    async fn withdraw(&self, ticket: Ticket) {
        if let Err(e) = self.state.coordinator.cancel_ticket(&ticket).await {
            // The backend skips it once this replica's lease runs out.
            tracing::warn!(target: "botmesh", key = %ticket.key, error = %e, "withdrawing a ticket failed");
        }
    }

    async fn release(&self, turn: Arc<dyn Turn>, options: ReleaseOptions) {
        Grants::release(&*self.state, &turn, options).await;
    }

    async fn begin(
        &self,
        turn: Arc<dyn Turn>,
        own: Own,
        sweep: Vec<String>,
        journal: Option<Arc<dyn Journal>>,
    ) -> Option<Box<dyn TurnRun>> {
        let grants: Arc<dyn Grants> = Arc::clone(&self.state) as Arc<dyn Grants>;
        match turns::begin(&grants, turn, own, sweep, journal) {
            turns::Begin::Now(run) => run,
            turns::Begin::Reading(reading) => reading.await,
        }
    }

    fn status(&self) -> CoordinationStatus {
        let state = &self.state;
        let now = Instant::now();
        let mut status = CoordinationStatus::default();
        {
            let held = lock(&state.held);
            status.turns_held = held.len();
            let mut oldest: Vec<(&ChatKey, &Hold)> = held.iter().collect();
            oldest.sort_unstable_by_key(|(_, hold)| hold.since);
            status.oldest_turns = oldest
                .into_iter()
                .take(CoordinationStatus::TURNS_SHOWN)
                .map(|(key, hold)| {
                    let mut turn = HeldTurn::default();
                    turn.chat = key.as_str().to_owned();
                    turn.fence = hold.grant.fence;
                    turn.held_ms = millis(now.duration_since(hold.since));
                    turn
                })
                .collect();
        }
        let mut leading: Vec<Leading> = lock(&state.leading)
            .values()
            .map(|lead| {
                let mut leading = Leading::default();
                leading.name = lead.name.clone();
                leading.fence = lead.fence;
                leading
            })
            .collect();
        leading.sort_by(|a, b| a.name.cmp(&b.name));
        status.replica_id = state.replica_id.clone();
        status.lease_ms = millis(state.lease);
        status.renewed_ms_ago = millis(now.duration_since(*lock(&state.renewed_at)));
        status.heartbeat_loop_ms_ago = millis(now.duration_since(*lock(&state.looped_at)));
        status.stalled = state.stalled();
        status.stepped_down = state.stepped_down.load(Ordering::SeqCst);
        status.subscribed = state.coordinator.subscribed();
        status.leading = leading;
        status
    }

    async fn cluster(&self) -> Result<ClusterView, Error> {
        let names = lock(&self.elected).clone();
        self.state.coordinator.cluster(&names).await
    }
}
