//! The span of one message, from its arrival to its acknowledgement.

use botmesh_traits::{ChatKey, Inbound};

use super::TracePropagation;
use crate::coordination::Taken;
use tracing::Span;
use tracing::field::Empty;

/// Opens the spans messages run in (see the module doc of [`telemetry`](super)).
pub(crate) struct MessageSpan;

impl MessageSpan {
    /// The span of a message that arrived at replica `replica`: a root of its own (a message
    /// is one trace), following from the span it arrived in (a webhook request's, say).
    pub(crate) fn arrived(inbound: &Inbound, key: &ChatKey, replica: &str) -> Span {
        let span = Self::root(inbound, key, replica);
        span.follows_from(Span::current());
        span
    }

    fn root(inbound: &Inbound, key: &ChatKey, replica: &str) -> Span {
        tracing::info_span!(
            target: "botmesh",
            parent: None,
            "botmesh.message",
            provider = %inbound.provider,
            chat = %key,
            message.id = %inbound.id,
            replica,
            fence = Empty,
            outcome = Empty,
            taken_from = Empty,
        )
    }

    /// The span of a journaled message taken over here, linked by `propagation` to the one
    /// it had where it arrived (and to nothing else: not to the message whose turn took it
    /// over), before it is first entered.
    pub(crate) fn taken_over(
        taken: &Taken,
        replica: &str,
        propagation: Option<&dyn TracePropagation>,
    ) -> Span {
        let span = Self::root(&taken.inbound, &taken.inbound.key(), replica);
        span.record("taken_from", taken.from.as_str());
        if let (Some(propagation), Some(context)) = (propagation, taken.trace.as_deref()) {
            propagation.link(&span, context);
        }
        span
    }
}
