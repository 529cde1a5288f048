//! The crate's errors, and how they become the contract's.

use std::path::PathBuf;
use std::time::Duration;

use botmesh_traits::BoxError;

/// A `Result` whose error defaults to this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong with a WhatsApp Web session, on either side of the client seam.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another opener holds the session's lock file: the session is open in another process
    /// (or another provider of this one). Only the elected replica should open it.
    #[error("the session in {dir} is open elsewhere: its lock is held")]
    SessionInUse {
        /// The session directory.
        dir: PathBuf,
    },
    /// The session directory or its lock file cannot be created or read.
    #[error("the session directory {dir} cannot be used")]
    SessionDir {
        /// The session directory.
        dir: PathBuf,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// The session is kept in the bot's store, and another opener holds its lock there: the
    /// session is open in another replica. Only the elected replica should open it.
    #[error("the session is open elsewhere: its lock {key} in the store is held")]
    SessionLocked {
        /// The lock's key.
        key: String,
    },
    /// The session is kept in the bot's store, but the bot has no store, or one without fenced
    /// locks (give the bot a shared store: Redis, Postgres, ...).
    #[error("the session is kept in the bot's store, but the bot has no store with fenced locks")]
    NoStore,
    /// The bot's store failed while the session was opened or closed.
    #[error("the bot's store failed to {op}")]
    Store {
        /// What was being done.
        op: &'static str,
        /// The store's error.
        #[source]
        source: botmesh_traits::Error,
    },
    /// The session is not connected to WhatsApp now.
    #[error("the session is not connected")]
    NotConnected,
    /// WhatsApp logged the linked device out: it must be paired again.
    #[error("the session was logged out; pair the device again")]
    LoggedOut,
    /// WhatsApp throttled the session.
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited {
        /// How long to wait before sending again.
        retry_after: Duration,
    },
    /// The recipient cannot be reached (not on WhatsApp, or the bot left the group).
    #[error("{chat} cannot be reached")]
    RecipientGone {
        /// The chat's JID.
        chat: String,
    },
    /// A message that cannot be sent as it is (a chat that is not a JID, say).
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong with it.
        reason: String,
    },
    /// Something WhatsApp Web cannot carry.
    #[error("{what} is not supported on WhatsApp Web")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// The WhatsApp client failed.
    #[error("the WhatsApp client failed to {op}")]
    Client {
        /// What it was doing, such as `send`.
        op: &'static str,
        /// Its error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Wraps an error of the WhatsApp client raised while doing `op`.
    pub fn client(op: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Client { op, source: source.into() }
    }

    /// The contract's error for this one, raised by provider `provider` about `chat`.
    pub(crate) fn into_contract(self, provider: &str, chat: Option<&str>) -> botmesh_traits::Error {
        use botmesh_traits::Error as E;
        match self {
            Self::NotConnected => E::TransportClosed { provider: provider.to_owned() },
            Self::LoggedOut => E::Unauthorized { provider: provider.to_owned() },
            Self::RateLimited { retry_after } => E::RateLimited { retry_after },
            Self::RecipientGone { chat: gone } => E::RecipientGone {
                provider: provider.to_owned(),
                chat: chat.map_or(gone, str::to_owned),
            },
            Self::InvalidInput { reason } => E::InvalidInput { reason },
            Self::Unsupported { what } => E::Unsupported { op: what },
            e @ (Self::SessionInUse { .. }
            | Self::SessionDir { .. }
            | Self::SessionLocked { .. }
            | Self::NoStore
            | Self::Store { .. }) => E::provider(provider, "open the session", e),
            Self::Client { op, source } => {
                E::Provider { provider: provider.to_owned(), op, source }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use botmesh_traits::{ErrorKind, Recovery};

    use super::*;

    #[test]
    fn session_errors_become_the_contract_s_typed_errors() {
        let kind = |e: Error| e.into_contract("wa", Some("1@s.whatsapp.net")).kind();
        assert_eq!(kind(Error::NotConnected), ErrorKind::TransportClosed);
        assert_eq!(kind(Error::LoggedOut), ErrorKind::Unauthorized);
        let limited = Error::RateLimited { retry_after: Duration::from_secs(2) };
        assert_eq!(kind(limited), ErrorKind::RateLimited);
        assert_eq!(kind(Error::RecipientGone { chat: "x".into() }), ErrorKind::RecipientGone);
        let busy = Error::SessionInUse { dir: "/s".into() }.into_contract("wa", None);
        assert_eq!(busy.recovery(), Recovery::Retry, "another replica may give it up");
        let held = Error::SessionLocked { key: "k".into() }.into_contract("wa", None);
        assert_eq!(held.recovery(), Recovery::Retry, "its lock may run out");
    }
}
