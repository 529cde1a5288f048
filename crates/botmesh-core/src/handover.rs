//! What happens to a live conversation when its chat moves to another replica (or to this
//! process restarted), and the durability of inbound messages and sends.
//!
//! See [the hand-over guide](crate::guide::handover) for the whole story with a worked crash
//! timeline.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{BoxError, ChatKey};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Ctx;
use crate::boxing::errors_boxed;

/// Whether flows without [`.persistent()`](crate::Flow::persistent) are carried over.
///
/// In a configuration file (`serde` feature): `"off"` or `"forward"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum FlowHandover {
    /// They live in the memory of the replica that runs them (the default). With a
    /// [`Fallback`] other than `Drop`, they are treated like free-form conversations.
    #[default]
    Off,
    /// They write an ephemeral checkpoint at every step, which expires after the hand-over
    /// TTL and carries a fingerprint of the flow, so another replica continues them.
    Forward,
}

/// A user function deciding what to do with a conversation that could not be carried over.
pub type FallbackFn =
    Arc<dyn Fn(HandoverInfo, Ctx) -> BoxFuture<'static, Result<bool, BoxError>> + Send + Sync>;

/// What the replica that takes a chat does with a conversation it cannot continue.
///
/// In a configuration file (`serde` feature): `"drop"`, `"notify"` or `"restart"`;
/// [`Fallback::Custom`] is code, set with [`Handover::fallback`].
#[derive(Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Fallback {
    /// Nothing: the message routes as a new one (the default). No stub is written.
    #[default]
    Drop,
    /// Replies the localized `core.conversation.interrupted` text (or
    /// [`Handover::notify_message`]) and consumes the message.
    Notify,
    /// Enters the conversation again by name, from its beginning and with an empty state; the
    /// message is taken as the one that started it.
    Restart,
    /// Calls a function of yours; it returns `true` when it consumed the message.
    #[cfg_attr(feature = "serde", serde(skip))]
    Custom(FallbackFn),
}

impl Fallback {
    /// A [`Fallback::Custom`] from an async function.
    pub fn custom<F, Fut, E>(f: F) -> Self
    where
        F: Fn(HandoverInfo, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Self::Custom(Arc::new(move |info, ctx| {
            let fut = f(info, ctx);
            Box::pin(errors_boxed(fut))
        }))
    }

    pub(crate) fn is_drop(&self) -> bool {
        matches!(self, Self::Drop)
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Drop => "Drop",
            Self::Notify => "Notify",
            Self::Restart => "Restart",
            Self::Custom(_) => "Custom(..)",
        })
    }
}

/// Why a conversation went to the [`Fallback`] instead of continuing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FallbackReason {
    /// A free-form conversation: its stack cannot be serialized.
    Conversation,
    /// A flow without `.persistent()` while flows are not forwarded.
    NotForwarded,
    /// A forwarded flow that keeps state outside its JSON state ([`ConvCtx::set_local`]).
    ///
    /// [`ConvCtx::set_local`]: crate::ConvCtx::set_local
    NotJson,
    /// A forwarded flow whose definition changed (a rolling deploy): its fingerprint differs.
    Changed,
}

impl FallbackReason {
    /// The reason as a short lowercase word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Conversation => "conversation",
            Self::NotForwarded => "not-forwarded",
            Self::NotJson => "not-json",
            Self::Changed => "changed",
        }
    }
}

/// What a [`Fallback::Custom`] function learns about the conversation it is handed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HandoverInfo {
    /// The chat key.
    pub key: ChatKey,
    /// The flow or conversation.
    pub name: String,
    /// Why it could not continue.
    pub reason: FallbackReason,
    /// The flow's JSON state at its last checkpoint (empty for a conversation's stub).
    pub state: Map<String, Value>,
}

/// How live conversations are carried between replicas.
///
/// ```
/// use std::time::Duration;
/// use botmesh_core::{Fallback, FlowHandover, Handover};
///
/// let handover = Handover::new()
///     .flows(FlowHandover::Forward)
///     .fallback(Fallback::Notify)
///     .ttl(Duration::from_secs(600));
/// # let _ = handover;
/// ```
///
/// With the `serde` feature it reads from a configuration file (the keys are the builder's
/// methods, durations as text); what the file leaves out keeps the defaults of
/// [`Handover::new`], and an unknown key is an error:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// let handover: botmesh_core::Handover =
///     serde_json::from_str(r#"{ "flows": "forward", "fallback": "notify", "ttl": "10m" }"#)
///         .unwrap();
/// # }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(default, deny_unknown_fields))]
#[must_use = "settings do nothing until given to `BotBuilder::handover`"]
pub struct Handover {
    pub(crate) flows: FlowHandover,
    pub(crate) fallback: Fallback,
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub(crate) ttl: Option<Duration>,
    pub(crate) notify_message: Option<String>,
    pub(crate) max_answer_bytes: usize,
}

impl Default for Handover {
    fn default() -> Self {
        Self::new()
    }
}

impl Handover {
    /// The TTL of ephemeral checkpoints and stubs when neither [`Handover::ttl`] nor the
    /// conversation's own timeout says otherwise.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60);

    /// The largest answer embedded in a checkpoint when durability is off.
    pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 * 1024;

    /// Flows off, fallback `Drop`: only `.persistent()` flows continue elsewhere.
    pub fn new() -> Self {
        Self {
            flows: FlowHandover::Off,
            fallback: Fallback::Drop,
            ttl: None,
            notify_message: None,
            max_answer_bytes: Self::DEFAULT_MAX_ANSWER_BYTES,
        }
    }

    /// Whether flows without `.persistent()` are forwarded.
    pub fn flows(mut self, flows: FlowHandover) -> Self {
        self.flows = flows;
        self
    }

    /// What to do with a conversation that cannot be carried over.
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// How long an ephemeral checkpoint or a stub lives after its last write. Default: the
    /// conversation's timeout, else five minutes. Keep it at or above your timeouts.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The text [`Fallback::Notify`] replies, instead of the localized
    /// `core.conversation.interrupted`.
    pub fn notify_message(mut self, text: impl Into<String>) -> Self {
        self.notify_message = Some(text.into());
        self
    }

    /// The largest recorded answer embedded in a checkpoint without durability (default
    /// 16 KiB); a larger one is not recorded and its step asks again.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// The TTL for a conversation with wait timeout `timeout`.
    pub(crate) fn ttl_for(&self, timeout: Option<Duration>) -> Duration {
        let base = self.ttl.or(timeout).unwrap_or(Self::DEFAULT_TTL);
        // While it waits, the entry never expires before the wait's own timeout.
        timeout.map_or(base, |t| base.max(t))
    }

    /// Whether anything is written for conversations that are not `.persistent()` flows.
    pub(crate) fn writes_anything(&self) -> bool {
        self.flows == FlowHandover::Forward || !self.fallback.is_drop()
    }
}

/// A 64-bit FNV-1a hash, stable across builds and platforms (for flow fingerprints).
pub(crate) fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn handover_from_a_config_file() {
        let h: Handover = serde_json::from_str(
            r#"{ "flows": "forward", "fallback": "restart", "ttl": "10m", "notify_message": "Sorry" }"#,
        )
        .unwrap();
        assert_eq!(h.flows, FlowHandover::Forward);
        assert!(matches!(h.fallback, Fallback::Restart));
        assert_eq!(h.ttl, Some(Duration::from_secs(600)));
        assert_eq!(h.notify_message.as_deref(), Some("Sorry"));
        assert_eq!(h.max_answer_bytes, Handover::DEFAULT_MAX_ANSWER_BYTES, "left out: the default");
        let empty: Handover = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.ttl, None);
        assert!(empty.fallback.is_drop());
    }

    #[test]
    fn handover_refuses_unknown_keys_and_values() {
        assert!(serde_json::from_str::<Handover>(r#"{ "fallbak": "notify" }"#).is_err());
        // A function is code, not configuration.
        assert!(serde_json::from_str::<Handover>(r#"{ "fallback": "custom" }"#).is_err());
        assert!(serde_json::from_str::<Handover>(r#"{ "ttl": "forever" }"#).is_err());
    }
}
