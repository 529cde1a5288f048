//! The coordination runtime of one replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_core::coordination::{Coordination, Host, Journal, Own, Turn, TurnRun};
use botmesh_core::retry;
use botmesh_core::traits::{
    ChatKey, Coordinator, Error, Leadership, LeaseLostReason, ReleaseOptions, Ticket,
    TransportStatus, TurnGrant, async_trait,
};
use botmesh_core::{BotError, Event, FollowReason};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::turns::{self, Grants};
use crate::{CoordinationConfig, ProviderSession};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The critical sections below hold no user code and do not panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by the runtime, its loops and the turns it hands out.
pub(crate) struct State {
    coordinator: Arc<dyn Coordinator>,
    replica_id: String,
    lease: Duration,
    /// Past this long without a successful renewal, leases are given up locally.
    stall_after: Duration,
    /// When the last successful heartbeat was sent.
    renewed_at: Mutex<Instant>,
    /// When the leases were last given up locally.
    given_up_at: Mutex<Option<Instant>>,
    /// Bumped when this replica gives its leases up locally: turns from an older epoch are lost.
    epoch: AtomicU64,
    /// The turns held now, by chat key, each with whether its loss was reported already.
    held: Mutex<HashMap<ChatKey, (TurnGrant, bool)>>,
    /// Releases that failed on the wire (with whether the turn was used), retried by the
    /// heartbeat loop.
    unreleased: Mutex<Vec<(TurnGrant, ReleaseOptions)>>,
    /// The transport leadership held now.
    leading: Mutex<Option<Leadership>>,
    /// Held while the transport is started or stopped for the leadership, so a stop after the
    /// leadership was given up can never be overtaken by a start for it.
    transport: tokio::sync::Mutex<()>,
    /// A resignation Redis did not confirm: retried before campaigning again.
    unresigned: Mutex<Option<Leadership>>,
    host: Mutex<Option<Arc<dyn Host>>>,
    stopping: AtomicBool,
    /// Set by a step-down before stopping: no more campaigning, heartbeats go on.
    stepped_down: AtomicBool,
}

impl State {
    fn host(&self) -> Option<Arc<dyn Host>> {
        lock(&self.host).clone()
    }

    fn emit(&self, event: Event) {
        if let Some(host) = self.host() {
            host.emit(event);
        }
    }

    /// Whether the leases can no longer be trusted: the last renewal is too old.
    fn stalled(&self) -> bool {
        lock(&self.renewed_at).elapsed() > self.stall_after
    }

    /// Gives every lease up locally: held turns become lost, the transport stops at once.
    /// Called again while the replica stays stalled, it reports only the turns taken since:
    /// one loss is one event.
    fn give_up(self: &Arc<Self>, reason: LeaseLostReason) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        *lock(&self.given_up_at) = Some(Instant::now());
        let newly_lost: Vec<ChatKey> = lock(&self.held)
            .iter_mut()
            .filter(|(_, (_, reported))| !*reported)
            .map(|(key, (_, reported))| {
                *reported = true;
                key.clone()
            })
            .collect();
        for key in newly_lost {
            self.emit(Event::LeaseLost { key, reason });
        }
        if let Some(lead) = lock(&self.leading).take() {
            self.emit(Event::Follower { name: lead.name, reason: FollowReason::Lost });
            // Stopped now, not at the election loop's next pass: the lease may expire in the
            // backend within a third of it, and a standby start the transport then.
            let state = Arc::clone(self);
            tokio::spawn(async move {
                let Some(host) = state.host() else { return };
                let _serial = state.transport.lock().await;
                if let Err(e) = host.stop_transport().await {
                    tracing::warn!(target: "botmesh", error = %e, "stopping the transport after losing its lease");
                }
            });
        }
    }

    /// Whether the transport leadership `lead` is still this replica's (not given up since).
    fn leads(&self, lead: &Leadership) -> bool {
        lock(&self.leading).as_ref().is_some_and(|l| l.fence == lead.fence)
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
        let Some((grant, _)) = lock(&self.held).remove(turn.key()) else { return };
        let released =
            retry::within(self.lease / 6, || self.coordinator.release_turn_with(&grant, &options));
        if let Err(e) = released.await {
            tracing::warn!(target: "botmesh", key = %turn.key(), error = %e, "release failed; retrying within lease / 3");
            lock(&self.unreleased).push((grant, options));
        }
    }
}

/// A turn held by this replica.
struct HeldTurn {
    key: ChatKey,
    grant: TurnGrant,
    epoch: u64,
    state: Arc<State>,
}

impl Turn for HeldTurn {
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

/// The runtime: implements the bot's [`Coordination`] over a [`Coordinator`].
pub(crate) struct Runtime {
    state: Arc<State>,
    turn_wait: Duration,
    settle: Duration,
    provider_session: ProviderSession,
    provider_down: Duration,
    step_down_pause: Duration,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Runtime {
    pub(crate) fn new(cfg: CoordinationConfig) -> Self {
        let replica_id = cfg.coordinator.replica_id().to_owned();
        let lease = cfg.coordinator.lease();
        Self {
            state: Arc::new(State {
                coordinator: cfg.coordinator,
                replica_id,
                lease,
                stall_after: lease * 2 / 3,
                renewed_at: Mutex::new(Instant::now()),
                given_up_at: Mutex::new(None),
                epoch: AtomicU64::new(0),
                held: Mutex::default(),
                unreleased: Mutex::default(),
                leading: Mutex::new(None),
                transport: tokio::sync::Mutex::new(()),
                unresigned: Mutex::new(None),
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

/// Campaigns for `provider:<id>` and runs the transport while elected.
async fn election_loop(
    state: Arc<State>,
    host: Arc<dyn Host>,
    provider_down: Duration,
    step_down_pause: Duration,
) {
    let name = format!("provider:{}", host.provider_id());
    let period = state.lease / 3;
    let mut announced_standby = false;
    let mut down_since: Option<Instant> = None;
    loop {
        if state.stopping.load(Ordering::SeqCst) || state.stepped_down.load(Ordering::SeqCst) {
            return;
        }
        let unresigned = lock(&state.unresigned).clone();
        if let Some(lead) = unresigned {
            // Our leadership lives as long as our heartbeat: campaigning before the
            // resignation lands would only win it back.
            if state.coordinator.resign(&lead).await.is_ok() {
                lock(&state.unresigned).take();
            } else {
                tokio::time::sleep(period).await;
                continue;
            }
        }
        let was_leading = lock(&state.leading).clone();
        match state.coordinator.try_lead(&name, state.lease).await {
            Ok(Some(lead)) if !state.stalled() => {
                if was_leading.as_ref().is_none_or(|l| l.fence != lead.fence) {
                    *lock(&state.leading) = Some(lead.clone());
                    state.emit(Event::Leader { name: name.clone(), fence: lead.fence });
                    announced_standby = false;
                    down_since = None;
                    let _serial = state.transport.lock().await;
                    // Given up meanwhile (a stall): its stop ran or waits behind this lock.
                    if state.leads(&lead)
                        && let Err(e) = host.start_transport().await
                    {
                        tracing::warn!(target: "botmesh", error = %e, "starting the transport failed");
                    }
                }
                if host.transport_status() == TransportStatus::Closed {
                    let since = *down_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= provider_down {
                        step_down(&state, &host, &lead, FollowReason::ProviderDown).await;
                        down_since = None;
                        tokio::time::sleep(step_down_pause).await;
                        continue;
                    }
                } else {
                    down_since = None;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                let lost = lock(&state.leading).take();
                if lost.is_some() {
                    state.emit(Event::Follower { name: name.clone(), reason: FollowReason::Lost });
                    let _serial = state.transport.lock().await;
                    if let Err(e) = host.stop_transport().await {
                        tracing::warn!(target: "botmesh", error = %e, "stopping the transport failed");
                    }
                } else if !announced_standby {
                    state.emit(Event::Follower {
                        name: name.clone(),
                        reason: FollowReason::Standby,
                    });
                }
                announced_standby = true;
            }
            Err(e) => tracing::warn!(target: "botmesh", error = %e, "campaign failed"),
        }
        tokio::time::sleep(period).await;
    }
}

async fn step_down(
    state: &Arc<State>,
    host: &Arc<dyn Host>,
    lead: &Leadership,
    reason: FollowReason,
) {
    lock(&state.leading).take();
    if let Err(e) = host.stop_transport().await {
        tracing::warn!(target: "botmesh", error = %e, "stopping the transport failed");
    }
    // Announced before the resignation lands, so whoever wins the lease next can
    // only do so after this replica has said it follows.
    state.emit(Event::Follower { name: lead.name.clone(), reason });
    if let Err(e) = state.coordinator.resign(lead).await {
        tracing::warn!(target: "botmesh", error = %e, "resigning failed; retrying before campaigning again");
        *lock(&state.unresigned) = Some(lead.clone());
    }
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
        let mut tasks = vec![tokio::spawn(heartbeat_loop(Arc::clone(state)))];
        let elect = match self.provider_session {
            ProviderSession::Leader => true,
            ProviderSession::Shared => false,
            _ => host.provider_exclusive(),
        };
        if elect {
            tasks.push(tokio::spawn(election_loop(
                Arc::clone(state),
                host,
                self.provider_down,
                self.step_down_pause,
            )));
        } else {
            host.start_transport().await?;
        }
        lock(&self.tasks).extend(tasks);
        Ok(())
    }

    async fn step_down(&self) {
        let state = &self.state;
        state.stepped_down.store(true, Ordering::SeqCst);
        let lead = lock(&state.leading).take();
        if let Some(lead) = lead {
            state.emit(Event::Follower { name: lead.name.clone(), reason: FollowReason::Stopping });
            if let Err(e) = state.coordinator.resign(&lead).await {
                tracing::warn!(target: "botmesh", error = %e, "resigning failed; the lease will expire");
            }
        }
    }

    async fn stop(&self) {
        let state = &self.state;
        state.stopping.store(true, Ordering::SeqCst);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        let lead = lock(&state.leading).take();
        if let Some(lead) = lead {
            state.emit(Event::Follower { name: lead.name.clone(), reason: FollowReason::Stopping });
            if let Err(e) = state.coordinator.resign(&lead).await {
                tracing::warn!(target: "botmesh", error = %e, "resigning failed; the lease will expire");
            }
        }
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

    async fn acquire(&self, ticket: Ticket) -> Result<Arc<dyn Turn>, Error> {
        let state = &self.state;
        // Taken before the wait: a stall noticed while waiting voids what the wait returns.
        let epoch = state.epoch.load(Ordering::SeqCst);
        let grant = match &ticket.grant {
            Some(grant) => grant.clone(),
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
        lock(&state.held).insert(key.clone(), (grant.clone(), false));
        Ok(Arc::new(HeldTurn { key, grant, epoch, state: Arc::clone(state) }))
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
        turns::begin(&grants, turn, own, sweep, journal).await
    }
}
