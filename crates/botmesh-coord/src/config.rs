//! The coordination settings of a replica.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Coordinator;

use crate::runtime::Runtime;

/// Where a provider's transport runs when the bot has several replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProviderSession {
    /// Exclusive sessions (as the provider declares them) run on the elected replica only;
    /// shared ones on every replica.
    #[default]
    Auto,
    /// Run the transport on the elected replica only, whatever the provider declares.
    Leader,
    /// Run the transport on every replica, whatever the provider declares.
    Shared,
}

/// The coordination settings of one replica; [`build`](Self::build) makes the runtime to hand
/// to `BotBuilder::coordination`.
///
/// Defaults: `lease` 15 s, `turn_wait` 2 min, `settle` 1 min, `provider_session`
/// [`ProviderSession::Auto`], `provider_down` 1 min, `step_down_pause` 5 s. The replica's id
/// and its incarnation come from the coordinator.
#[derive(Clone)]
pub struct CoordinationConfig {
    pub(crate) coordinator: Arc<dyn Coordinator>,
    pub(crate) lease: Duration,
    pub(crate) turn_wait: Duration,
    pub(crate) settle: Duration,
    pub(crate) provider_session: ProviderSession,
    pub(crate) provider_down: Duration,
    pub(crate) step_down_pause: Duration,
}

impl std::fmt::Debug for CoordinationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinationConfig")
            .field("replica_id", &self.coordinator.replica_id())
            .field("lease", &self.lease)
            .field("turn_wait", &self.turn_wait)
            .field("settle", &self.settle)
            .field("provider_session", &self.provider_session)
            .field("provider_down", &self.provider_down)
            .finish_non_exhaustive()
    }
}

impl CoordinationConfig {
    /// The defaults above, over `coordinator`.
    pub fn new(coordinator: impl Coordinator) -> Self {
        Self::from_arc(Arc::new(coordinator))
    }

    /// The defaults above, over a shared coordinator.
    pub fn from_arc(coordinator: Arc<dyn Coordinator>) -> Self {
        Self {
            coordinator,
            lease: Duration::from_secs(15),
            turn_wait: Duration::from_secs(120),
            settle: Duration::from_secs(60),
            provider_session: ProviderSession::Auto,
            provider_down: Duration::from_secs(60),
            step_down_pause: Duration::from_secs(5),
        }
    }

    /// The takeover time after a crash, and how long a replica may freeze before it gives its
    /// chats up. Keep it well above the worst pause and backend round trip; 5 to 30 seconds
    /// suits most bots.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest a message waits for its chat's turn before it fails with
    /// `CoordinationUnavailable`.
    pub fn turn_wait(mut self, turn_wait: Duration) -> Self {
        self.turn_wait = turn_wait;
        self
    }

    /// The longest a turn stays held for a running conversation step. A step still running then
    /// is stopped (its checkpoint kept) before the turn is released; keep it above your longest
    /// step.
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Where the provider's transport runs.
    pub fn provider_session(mut self, session: ProviderSession) -> Self {
        self.provider_session = session;
        self
    }

    /// How long an elected replica's transport may stay closed before it steps down.
    pub fn provider_down(mut self, provider_down: Duration) -> Self {
        self.provider_down = provider_down;
        self
    }

    /// How long a replica that stepped down waits before it campaigns again.
    pub fn step_down_pause(mut self, pause: Duration) -> Self {
        self.step_down_pause = pause;
        self
    }

    /// The lease.
    pub fn get_lease(&self) -> Duration {
        self.lease
    }

    /// The turn wait.
    pub fn get_turn_wait(&self) -> Duration {
        self.turn_wait
    }

    /// The settle bound.
    pub fn get_settle(&self) -> Duration {
        self.settle
    }

    /// Builds the runtime.
    pub fn build(self) -> Arc<dyn Coordination> {
        Arc::new(Runtime::new(self))
    }
}
