//! Runs a botmesh bot as one of several replicas.
//!
//! Replicas of one bot share a [`Coordinator`] backend (`MemoryCoordinationHub` in tests,
//! Redis in production). This crate is the runtime on each replica that uses it:
//!
//! - **Turns.** Every message takes a ticket in its chat's queue on arrival; the chat's turns
//!   go to tickets in order, whichever replica holds them. The bot holds the turn until the
//!   conversation the message fed waits again or ends, at most [`CoordinationConfig::settle`].
//! - **A turn's work.** A turn hands the bot, in the chat's journal order, what the replicas
//!   its grant passed over (dead, stalled, or handing their work back) left unfinished, around
//!   the message the turn was taken for; it acknowledges each message once handled, hands back
//!   what this replica cannot finish, and releases what must wait for a later holder.
//! - **Leases.** Each replica renews its heartbeat every `lease / 3`; one renewal covers every
//!   turn and leadership it holds. A replica that dies loses them after `lease`.
//! - **The stall rule.** A replica that could not renew for most of its lease (two thirds of
//!   it) gives its leases up locally before they can expire in the backend: its later sends and
//!   checkpoint writes fail with `LeaseLost { reason: Stalled }` instead of acting out of turn.
//! - **Release repair.** A release that fails on the wire is retried by the heartbeat loop,
//!   within `lease / 3`.
//! - **Exclusive transports.** A provider whose capabilities declare an exclusive session runs
//!   only on the replica elected for `provider:<id>`; the others stand by and campaign, so a
//!   standby takes over within `lease + lease / 3` of the leader dying. A bot with several
//!   providers elects each exclusive one on its own, and a replica that leads none is
//!   preferred for a vacant one, so transports spread over the replicas. A leader whose
//!   transport stays closed for `provider_down` steps down, pauses, and campaigns again.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use botmesh_coord::CoordinationConfig;
//! use botmesh_core::{Bot, MemoryStore};
//! use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};
//! # use std::sync::Arc;
//!
//! let hub = MemoryCoordinationHub::new();
//! let store = Arc::new(MemoryStore::new());
//! let replica = |id: &str| {
//!     // The lease is the coordinator's setting.
//!     let coordinator = MemoryCoordinator::new(hub.clone(), id).with_lease(Duration::from_secs(5));
//!     Bot::builder()
//!         .provider(TestProvider::new())
//!         .store(store.clone())
//!         .coordination(CoordinationConfig::new(coordinator).build())
//!         .build()
//! };
//! let (a, b) = (replica("a").unwrap(), replica("b").unwrap());
//! # let _ = (a, b);
//! ```
//!
//! # Feature flags
//!
//! - `serde`: `CoordinationSettings`, the settings as a configuration file holds them, with
//!   durations as text (`"15s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod election;
mod lead;
mod left_over;
mod metered;
mod runtime;
mod state;
mod turns;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[handover]: botmesh_core::guide::handover"]
    #![doc = "[handover-webhook]: botmesh_core::guide::handover#acknowledging-a-webhook"]
    #![doc = "[`Bot::accept`]: botmesh_core::Bot::accept"]
    #![doc = "[compose]: https://github.com/botmesh/botmesh/tree/main/examples/compose"]
    #![doc = include_str!("../guide.md")]
}

#[cfg(feature = "serde")]
pub use config::CoordinationSettings;
pub use config::{CoordinationConfig, ProviderSession};
pub use lead::{Lead, LeadExt};

pub use botmesh_core::traits::Coordinator;
