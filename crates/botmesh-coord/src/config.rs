//! The coordination settings of a replica.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Coordinator;

use crate::runtime::Runtime;

/// Where a provider's transport runs when the bot has several replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
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
/// Defaults: `turn_wait` 2 min, `settle` 1 min, `provider_session` [`ProviderSession::Auto`],
/// `provider_down` 1 min, `step_down_pause` 5 s. The replica's id, its incarnation and its
/// lease come from the coordinator: the lease is set there and only there
/// (`store.coordinator(lease)`, `RedisCoordinator::with_lease`, `MemoryCoordinator::with_lease`;
/// 15 s by default).
#[derive(Clone)]
#[must_use = "settings do nothing until `build()` turns them into the runtime"]
pub struct CoordinationConfig {
    pub(crate) coordinator: Arc<dyn Coordinator>,
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
            .field("lease", &self.coordinator.lease())
            .field("turn_wait", &self.turn_wait)
            .field("settle", &self.settle)
            .field("provider_session", &self.provider_session)
            .field("provider_down", &self.provider_down)
            .finish_non_exhaustive()
    }
}

impl CoordinationConfig {
    /// The defaults above, over `coordinator`.
    ///
    /// To keep a handle to the coordinator (a test crashing or stalling a
    /// `MemoryCoordinator` or a `FaultyCoordinator`, say), wrap it in an `Arc` and pass a
    /// clone: an `Arc` of a coordinator is a coordinator.
    pub fn new(coordinator: impl Coordinator) -> Self {
        Self {
            coordinator: Arc::new(coordinator),
            turn_wait: Duration::from_secs(120),
            settle: Duration::from_secs(60),
            provider_session: ProviderSession::Auto,
            provider_down: Duration::from_secs(60),
            step_down_pause: Duration::from_secs(5),
        }
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

    /// The lease: the coordinator's (see [`Coordinator::lease`]).
    pub fn get_lease(&self) -> Duration {
        self.coordinator.lease()
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

/// Coordination settings as a configuration file holds them, with durations as text
/// (`"15s"`, `"2m"`). Fields left out keep [`CoordinationConfig`]'s defaults.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// let settings: botmesh_coord::CoordinationSettings =
///     serde_json::from_str(r#"{ "turn_wait": "30s", "settle": "90s", "provider_session": "leader" }"#).unwrap();
/// assert_eq!(settings.settle, Some(std::time::Duration::from_secs(90)));
/// # }
/// ```
#[cfg(feature = "serde")]
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CoordinationSettings {
    /// See [`CoordinationConfig::turn_wait`].
    #[serde(with = "humantime_serde")]
    pub turn_wait: Option<Duration>,
    /// See [`CoordinationConfig::settle`].
    #[serde(with = "humantime_serde")]
    pub settle: Option<Duration>,
    /// See [`CoordinationConfig::provider_session`].
    pub provider_session: Option<ProviderSession>,
    /// See [`CoordinationConfig::provider_down`].
    #[serde(with = "humantime_serde")]
    pub provider_down: Option<Duration>,
    /// See [`CoordinationConfig::step_down_pause`].
    #[serde(with = "humantime_serde")]
    pub step_down_pause: Option<Duration>,
}

#[cfg(feature = "serde")]
impl CoordinationSettings {
    /// Applies the settings that are present to `config`.
    pub fn apply(self, mut config: CoordinationConfig) -> CoordinationConfig {
        if let Some(v) = self.turn_wait {
            config = config.turn_wait(v);
        }
        if let Some(v) = self.settle {
            config = config.settle(v);
        }
        if let Some(v) = self.provider_session {
            config = config.provider_session(v);
        }
        if let Some(v) = self.provider_down {
            config = config.provider_down(v);
        }
        if let Some(v) = self.step_down_pause {
            config = config.step_down_pause(v);
        }
        config
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;
    use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};

    #[test]
    fn settings_from_a_config_file_override_only_what_they_name() {
        let settings: CoordinationSettings =
            serde_json::from_str(r#"{ "turn_wait": "1m 30s", "provider_session": "shared" }"#)
                .unwrap();
        let config = settings.apply(CoordinationConfig::new(MemoryCoordinator::new(
            MemoryCoordinationHub::new(),
            "a",
        )));
        assert_eq!(config.get_turn_wait(), Duration::from_secs(90));
        assert_eq!(config.get_settle(), Duration::from_secs(60), "left out: the default");
        assert_eq!(config.provider_session, ProviderSession::Shared);
    }

    #[test]
    fn unknown_settings_are_refused() {
        assert!(serde_json::from_str::<CoordinationSettings>(r#"{ "lease_ms": 10 }"#).is_err());
        assert!(serde_json::from_str::<CoordinationSettings>(r#"{ "settle": "soon" }"#).is_err());
        // The lease is the coordinator's setting, not this one's.
        assert!(serde_json::from_str::<CoordinationSettings>(r#"{ "lease": "10s" }"#).is_err());
    }
}
