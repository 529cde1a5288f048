//! The errors every botmesh crate shares.

use std::fmt;
use std::time::Duration;

/// A boxed error from a backend, a provider or user code.
///
/// Foreign error types never appear in this crate's API: they travel as the `source` of an
/// [`Error`], where callers can still downcast them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A `Result` whose error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a replica lost its hold on a chat, a lease or a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseLostReason {
    /// Another holder wrote after us: a compare-and-set was refused.
    Superseded,
    /// The lease ran out in the backend before it was renewed.
    Expired,
    /// This replica stalled for most of the lease and gave it up before it could expire.
    Stalled,
    /// The lease was given up on purpose (shutdown, step-down).
    Released,
}

impl LeaseLostReason {
    /// The reason as a short lowercase word, as it appears in logs and events.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Superseded => "superseded",
            Self::Expired => "expired",
            Self::Stalled => "stalled",
            Self::Released => "released",
        }
    }
}

impl fmt::Display for LeaseLostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error type of the botmesh contract.
///
/// Match on the variant, or on [`Error::kind`] when only the class matters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// This replica no longer holds what it was acting under.
    #[error("lease lost on {key}: {reason}")]
    LeaseLost {
        /// The chat key, lease or lock name that was lost.
        key: String,
        /// Why it was lost.
        reason: LeaseLostReason,
    },
    /// The provider's exclusive transport is connected on another replica.
    #[error("provider {provider} is connected on another replica; this one stands by")]
    ProviderNotLeader {
        /// The provider's id.
        provider: String,
    },
    /// A message could not get its chat's turn in time, or the coordination backend is down.
    #[error("coordination unavailable: {reason}")]
    CoordinationUnavailable {
        /// What was being attempted.
        reason: String,
        /// The backend's own error, if there was one.
        #[source]
        source: Option<BoxError>,
    },
    /// A store operation failed.
    #[error("store operation {op} failed")]
    Store {
        /// The operation, such as `set_checkpoint_if`.
        op: &'static str,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// The store does not implement an optional operation.
    #[error("the store does not support {op}")]
    Unsupported {
        /// The operation that was asked for.
        op: &'static str,
    },
    /// A provider operation failed.
    #[error("provider {provider} failed to {op}")]
    Provider {
        /// The provider's id.
        provider: String,
        /// The operation, such as `send`.
        op: &'static str,
        /// The transport's error.
        #[source]
        source: BoxError,
    },
    /// The provider's transport is closed.
    #[error("provider {provider} is not connected")]
    TransportClosed {
        /// The provider's id.
        provider: String,
    },
    /// The remote platform throttled us.
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited {
        /// How long the platform asked us to wait.
        retry_after: Duration,
    },
    /// The platform refused the provider's credentials (a revoked or wrong token). Sending
    /// again does not help; the provider reports its transport closed.
    #[error("provider {provider} is not authorized by its platform")]
    Unauthorized {
        /// The provider's id.
        provider: String,
    },
    /// The recipient cannot be reached any more (blocked the bot, left, deleted).
    #[error("chat {chat} cannot be reached on {provider}")]
    RecipientGone {
        /// The provider's id.
        provider: String,
        /// The chat.
        chat: String,
    },
    /// A message or file is larger than the platform or the bot accepts.
    #[error("{what} is too large: {size} bytes, the limit is {limit}")]
    TooLarge {
        /// What was too large.
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The platform takes only template messages for this chat now: WhatsApp's 24-hour
    /// customer service window (or Messenger's) has closed since the user last wrote. Send an
    /// approved template ([`OutboundContent::Template`](crate::OutboundContent::Template)).
    #[error("chat {chat} on {provider} takes only template messages now")]
    WindowClosed {
        /// The provider's id.
        provider: String,
        /// The chat.
        chat: String,
    },
    /// The bot has no provider with this id, or a send names none while the bot has several.
    #[error(
        "no provider {provider:?} in this bot; a bot with several providers sends through the one a message names (Outbound::via)"
    )]
    NoSuchProvider {
        /// The id asked for; empty when the send named none.
        provider: String,
    },
    /// Data read back from a store or a platform could not be understood.
    #[error("corrupt {what}")]
    Corrupt {
        /// What was being decoded.
        what: String,
        /// The decoding error.
        #[source]
        source: BoxError,
    },
    /// Input that the framework refuses, such as a message too large to accept.
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value is wrong (a malformed URL, a missing setting).
    #[error("invalid configuration")]
    Configuration(#[source] BoxError),
}

/// The class of an [`Error`], for code that only needs to decide what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::LeaseLost`].
    LeaseLost,
    /// See [`Error::ProviderNotLeader`].
    ProviderNotLeader,
    /// See [`Error::CoordinationUnavailable`].
    CoordinationUnavailable,
    /// See [`Error::Store`].
    Store,
    /// See [`Error::Unsupported`].
    Unsupported,
    /// See [`Error::Provider`].
    Provider,
    /// See [`Error::TransportClosed`].
    TransportClosed,
    /// See [`Error::RateLimited`].
    RateLimited,
    /// See [`Error::Unauthorized`].
    Unauthorized,
    /// See [`Error::RecipientGone`].
    RecipientGone,
    /// See [`Error::TooLarge`].
    TooLarge,
    /// See [`Error::NoSuchProvider`].
    NoSuchProvider,
    /// See [`Error::WindowClosed`].
    WindowClosed,
    /// See [`Error::Corrupt`].
    Corrupt,
    /// See [`Error::InvalidInput`].
    InvalidInput,
    /// See [`Error::Configuration`].
    Configuration,
}

impl ErrorKind {
    /// The kind in snake case, as logs and metric labels show it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LeaseLost => "lease_lost",
            Self::ProviderNotLeader => "provider_not_leader",
            Self::CoordinationUnavailable => "coordination_unavailable",
            Self::Store => "store",
            Self::Unsupported => "unsupported",
            Self::Provider => "provider",
            Self::TransportClosed => "transport_closed",
            Self::RateLimited => "rate_limited",
            Self::Unauthorized => "unauthorized",
            Self::RecipientGone => "recipient_gone",
            Self::TooLarge => "too_large",
            Self::NoSuchProvider => "no_such_provider",
            Self::WindowClosed => "window_closed",
            Self::Corrupt => "corrupt",
            Self::InvalidInput => "invalid_input",
            Self::Configuration => "configuration",
        }
    }
}

/// What to do about a failed operation: the one classification every part of botmesh uses to
/// decide between trying again, leaving the work to another replica, and giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recovery {
    /// A backend or the transport failed for a while: the same call may succeed if tried
    /// again. A message whose handling failed this way is not the user's fault; it runs again.
    Retry,
    /// This replica may no longer act for the chat or the transport (its turn or the
    /// transport's leadership is elsewhere): stop, keep the conversation where its checkpoint
    /// says, and leave the message to whoever holds the work now.
    HandBack,
    /// The call is wrong (bad input, a corrupt record, an unsupported operation, a wrong
    /// configuration): it fails the same way however often it is tried.
    Fail,
}

impl ErrorKind {
    /// What to do about an error of this kind.
    pub fn recovery(self) -> Recovery {
        match self {
            Self::CoordinationUnavailable
            | Self::Store
            | Self::Provider
            | Self::TransportClosed
            | Self::RateLimited => Recovery::Retry,
            Self::LeaseLost | Self::ProviderNotLeader => Recovery::HandBack,
            Self::Unsupported
            | Self::Corrupt
            | Self::InvalidInput
            | Self::Configuration
            | Self::Unauthorized
            | Self::RecipientGone
            | Self::TooLarge
            | Self::NoSuchProvider
            | Self::WindowClosed => Recovery::Fail,
        }
    }
}

impl Error {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::LeaseLost { .. } => ErrorKind::LeaseLost,
            Self::ProviderNotLeader { .. } => ErrorKind::ProviderNotLeader,
            Self::CoordinationUnavailable { .. } => ErrorKind::CoordinationUnavailable,
            Self::Store { .. } => ErrorKind::Store,
            Self::Unsupported { .. } => ErrorKind::Unsupported,
            Self::Provider { .. } => ErrorKind::Provider,
            Self::TransportClosed { .. } => ErrorKind::TransportClosed,
            Self::RateLimited { .. } => ErrorKind::RateLimited,
            Self::Unauthorized { .. } => ErrorKind::Unauthorized,
            Self::RecipientGone { .. } => ErrorKind::RecipientGone,
            Self::TooLarge { .. } => ErrorKind::TooLarge,
            Self::NoSuchProvider { .. } => ErrorKind::NoSuchProvider,
            Self::WindowClosed { .. } => ErrorKind::WindowClosed,
            Self::Corrupt { .. } => ErrorKind::Corrupt,
            Self::InvalidInput { .. } => ErrorKind::InvalidInput,
            Self::Configuration(_) => ErrorKind::Configuration,
        }
    }

    /// What a caller should do about this error; see [`Recovery`].
    pub fn recovery(&self) -> Recovery {
        self.kind().recovery()
    }

    /// Whether trying the same operation again later may succeed: its
    /// [`recovery`](Self::recovery) is [`Recovery::Retry`].
    ///
    /// Backend and transport faults are retryable; a lost lease, a transport led elsewhere,
    /// bad input or a wrong configuration are not.
    pub fn is_retryable(&self) -> bool {
        self.recovery() == Recovery::Retry
    }

    /// Wraps a backend error raised by store operation `op`.
    pub fn store(op: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Store { op, source: source.into() }
    }

    /// Wraps a decoding error for `what`.
    pub fn corrupt(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Corrupt { what: what.into(), source: source.into() }
    }

    /// Wraps a transport error raised by provider `provider` during `op`.
    pub fn provider(
        provider: impl Into<String>,
        op: &'static str,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Provider { provider: provider.into(), op, source: source.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_lost_is_not_retryable_and_names_its_reason() {
        let e = Error::LeaseLost { key: "chat:1".into(), reason: LeaseLostReason::Superseded };
        assert_eq!(e.kind(), ErrorKind::LeaseLost);
        assert!(!e.is_retryable());
        assert_eq!(e.to_string(), "lease lost on chat:1: superseded");
    }

    #[test]
    fn backend_faults_are_retryable() {
        let e = Error::store("get_chat", std::io::Error::other("reset"));
        assert!(e.is_retryable());
        let e = Error::CoordinationUnavailable { reason: "turn wait".into(), source: None };
        assert!(e.is_retryable());
    }

    #[test]
    fn a_turn_or_transport_held_elsewhere_is_handed_back_and_wrong_input_fails() {
        let e = Error::LeaseLost { key: "chat:1".into(), reason: LeaseLostReason::Stalled };
        assert_eq!(e.recovery(), Recovery::HandBack);
        let e = Error::ProviderNotLeader { provider: "wa".into() };
        assert_eq!(e.recovery(), Recovery::HandBack);
        assert!(!e.is_retryable());
        let e = Error::InvalidInput { reason: "too large".into() };
        assert_eq!(e.recovery(), Recovery::Fail);
        let e = Error::corrupt("checkpoint", std::io::Error::other("bad json"));
        assert_eq!(e.recovery(), Recovery::Fail);
    }
}
