//! The shared contract of botmesh.
//!
//! This crate holds the traits that providers ([`Provider`]), stores ([`Store`]) and
//! coordination backends ([`Coordinator`]) implement, the message model they exchange
//! ([`Inbound`], [`Outbound`]) and the errors users match on ([`Error`], [`ErrorKind`]).
//!
//! Depend on it when you write a provider, a store or a coordinator. To build a bot, depend on
//! `botmesh-core` instead: it re-exports this
//! crate as `botmesh_core::traits`, and the message types and errors a bot author uses at its
//! root.
//!
//! # Design
//!
//! The crate is small on purpose: traits, value types and errors, with no runtime. It depends
//! on `serde`, `thiserror`, `bytes`, `futures-core` and `async-trait` only, so a custom store or provider
//! pulls in no executor, no HTTP client and no database driver through it.
//!
//! The three traits are used as trait objects (`Arc<dyn Store>`), so their async methods are
//! written with [`async_trait`](macro@async_trait) and return boxed futures. New methods always arrive with a
//! default body, so an implementation written today keeps compiling; the one exception is
//! [`Provider::capabilities`], which every provider must state.
//!
//! Stores keep flow state as opaque JSON text: the runtime decides what a checkpoint holds, the
//! store only guarantees how it is written (revision chains, expiry, atomic compare-and-set).
//!
//! # Feature flags
//!
//! - `webhook` (off by default): the `webhook` module, what every webhook provider shares to
//!   serve HTTP with axum and tokio; the only part of the crate that brings a runtime.
//!
//! # Stores: a small required trait, optional capabilities
//!
//! [`Store`] holds what a single-process bot needs: chats, user data and checkpoints. What
//! replicas need comes in capability traits a store opts into ([`CasStore`], [`LockStore`],
//! [`LeaseStore`], [`TaskStore`], [`JournalStore`]), each found through an accessor of
//! [`Store`] that defaults to `None`; the [`Store`] docs show a store opting in.
//!
//! # Example: what a store can do
//!
//! ```
//! use botmesh_traits::Store;
//!
//! // The runtime asks the accessors before it relies on a capability.
//! fn describe(store: &dyn Store) -> String {
//!     let journal = if store.journal().is_some() { "a journal" } else { "no journal" };
//!     let cas = if store.cas().is_some() { "compare-and-set" } else { "plain writes" };
//!     format!("{journal}, {cas}, shared: {}", store.shared())
//! }
//! # let _ = describe;
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use async_trait::async_trait;
pub use bytes::Bytes;

mod cluster;
mod coordinator;
mod error;
mod intake;
mod message;
mod provider;
mod redact;
mod store;
mod turn_journal;
#[cfg(feature = "webhook")]
pub mod webhook;

pub use cluster::{ClusterView, LeaderEntry, ReplicaEntry};
pub use coordinator::{Coordinator, DEFAULT_LEASE, Leadership, ReleaseOptions, Ticket, TurnGrant};
pub use error::{BoxError, Error, ErrorKind, LeaseLostReason, Recovery, Result};
pub use intake::{Admit, Intake, Verdict};
pub use message::{
    Button, ChatId, ChatKey, Contact, Content, Inbound, Media, MediaKind, MediaSource, MessageId,
    Outbound, OutboundContent,
};
pub use provider::{
    Capabilities, Delivery, DeliveryStatus, InboundStream, Provider, ProviderEvent, SendReceipt,
    TransportStatus,
};
pub use redact::redact_url;
pub use store::{
    CasOutcome, CasStore, ChatRecord, CheckpointRecord, CheckpointWrite, FencedLock, InboxAppend,
    InboxRecord, InboxState, JournalStore, LeaseGrant, LeaseStore, LockStore, Store, TaskStore,
};
pub use turn_journal::{JournaledTicket, TurnJournal};
