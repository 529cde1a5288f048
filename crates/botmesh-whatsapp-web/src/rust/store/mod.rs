//! The session kept in the bot's store: whatsapp-rust's storage [`Backend`] over botmesh's
//! [`Store`].
//!
//! [`StoreBackend`] keeps each entry of the session (the device, Signal's identities,
//! sessions and keys, app-state keys and versions, the protocol's tables) as a checkpoint row
//! under the session's prefix (`botmesh:provider:<id>:session:`), through a write-through
//! cache: an entry is read from the store once, then from memory; every write goes to the
//! store before it returns. Collections that must be listed or swept by age have an index row
//! each. `rows.rs` is that layer; `signal.rs`, `appsync.rs`, `protocol.rs` and `device.rs`
//! implement whatsapp-rust's store traits on it.
//!
//! Only the opener that holds the session writes: the provider's lease elects it, and the
//! session's fenced lock in the store refuses a second opener; once the lock is lost or
//! released ([`SessionGuard`]), every write is refused.
//!
//! [`Backend`]: whatsapp_rust::wacore::store::traits::Backend

mod appsync;
mod device;
mod protocol;
mod rows;
mod signal;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use botmesh_traits::Store;

use crate::seam::SessionGuard;

use rows::Rows;

/// whatsapp-rust's storage backend over the bot's store.
pub struct StoreBackend {
    rows: Rows,
    /// Serializes this process's read-modify-writes of one entry (LID mappings, message
    /// secrets, tokens), which the store has no single operation for.
    merge: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for StoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBackend").finish_non_exhaustive()
    }
}

impl StoreBackend {
    /// The session kept in `store` under `prefix` (see
    /// [`WaOpen::store_prefix`](crate::seam::WaOpen::store_prefix)); writes are refused once
    /// `guard` is released.
    pub fn new(store: Arc<dyn Store>, prefix: impl Into<String>, guard: SessionGuard) -> Self {
        Self { rows: Rows::new(store, prefix.into(), guard), merge: tokio::sync::Mutex::new(()) }
    }
}
