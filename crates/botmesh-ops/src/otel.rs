//! A message's OpenTelemetry trace across replicas (feature `opentelemetry`).
//!
//! Each message gets a root span `botmesh.message` where it arrives (see
//! [`botmesh_core::telemetry`]). With [`Durability`](botmesh_core::Durability), a message
//! journaled by one replica and taken over by another (the first one died holding it) gets a
//! new `botmesh.message` span there, with `taken_from` set. [`W3cPropagation`] connects the
//! two for [`tracing-opentelemetry`](tracing_opentelemetry) users: the replica where the
//! message arrives keeps its span's context with the journal record, as a W3C `traceparent`;
//! the replica that takes it over adds that context to its own span as a link.
//!
//! # Wiring
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn demo(
//! #     provider: opentelemetry_sdk::trace::SdkTracerProvider,
//! #     whatsapp: botmesh_testing::TestProvider,
//! #     store: Arc<dyn botmesh_core::traits::Store>,
//! #     coordination: Arc<dyn botmesh_core::coordination::Coordination>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use botmesh_core::{Bot, BotError, Durability};
//! use botmesh_ops::otel::W3cPropagation;
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! // `provider`: your `SdkTracerProvider`, exporting with `opentelemetry-otlp`, say.
//! let tracer = provider.tracer("botmesh");
//! let subscriber =
//!     tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
//! tracing::subscriber::set_global_default(subscriber)?;
//!
//! let bot = Bot::builder()
//!     .provider(whatsapp)
//!     .store(store)
//!     .coordination(coordination)
//!     .durability(Durability::new())
//!     .trace_propagation(W3cPropagation::new())
//!     .on_message(|ctx| async move {
//!         ctx.reply("hello").await?;
//!         Ok::<_, BotError>(())
//!     })
//!     .build()?;
//! # let _ = bot;
//! # Ok(()) }
//! ```
//!
//! # A link, not a parent
//!
//! The span a message gets on the replica that took it over stays the root of a trace of its
//! own and *links* to the span the message got where it arrived; it is not made that span's
//! child:
//!
//! - botmesh makes every `botmesh.message` span a root, one trace per message and replica:
//!   a takeover is one more delivery of the message, a new unit of work, the way the
//!   OpenTelemetry messaging conventions link a message's processing to the context it was
//!   sent in rather than nest it there.
//! - The span it would hang from usually never reaches the backend: the replica that had it
//!   died before closing it. As a parent, it would leave the takeover's whole tree under a
//!   missing root ("missing span" in Jaeger or Tempo) and stretch the first trace over the
//!   lease timeout and the takeover; as a link it is one click away, and each trace keeps
//!   its own duration.
//! - The takeover's trace takes its own sampling decision, rather than inheriting, through a
//!   parent-based sampler, that of a span whose replica is gone.
//!
//! The link carries the attribute `botmesh.link = "arrival"`, telling it apart from the
//! follows-from links `tracing-opentelemetry` adds for [`Span::follows_from`] (a message's
//! span on arrival follows from the span it arrived in, a webhook request's, say).
//!
//! Only the `traceparent` is kept (the trace id, the span id and the sampled flag), not the
//! `tracestate`: the journal keeps one short string per message.

use botmesh_core::telemetry::TracePropagation;
use opentelemetry::KeyValue;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The attribute of the link a taken-over message's span gets to its span where it arrived:
/// `botmesh.link = "arrival"`.
pub const LINK_ATTRIBUTE: &str = "botmesh.link";

/// The value of [`LINK_ATTRIBUTE`] on that link.
pub const ARRIVAL: &str = "arrival";

/// A [`TracePropagation`] for `tracing-opentelemetry`: the context of a message's span where
/// it arrives, kept with its journal record as a W3C `traceparent`, becomes a link of the span
/// it gets on a replica that takes it over. See the [module documentation](self).
///
/// Give it to [`BotBuilder::trace_propagation`](botmesh_core::BotBuilder::trace_propagation)
/// on every replica, with a `tracing_opentelemetry::layer()` in the subscriber. Without that
/// layer (or with the span filtered out of it) the span has no OpenTelemetry context, and
/// nothing is kept.
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "a propagation does nothing until given to `BotBuilder::trace_propagation`"]
pub struct W3cPropagation {
    _private: (),
}

impl W3cPropagation {
    /// The propagation; it has no settings.
    pub const fn new() -> Self {
        Self { _private: () }
    }
}

impl TracePropagation for W3cPropagation {
    /// The span's OpenTelemetry context as a W3C `traceparent`
    /// (`00-{trace id}-{span id}-{flags}`), or `None` when the span has none.
    fn inject(&self, span: &Span) -> Option<String> {
        let context = span.context();
        let span = context.span();
        let span_context = span.span_context();
        span_context.is_valid().then(|| traceparent(span_context))
    }

    /// Adds the span context `context` names, a `traceparent`, to `span` as a remote link with
    /// `botmesh.link = "arrival"`. A context that is not a valid `traceparent` is ignored: the
    /// span keeps no link.
    fn link(&self, span: &Span, context: &str) {
        if let Some(linked) = parse_traceparent(context) {
            span.add_link_with_attributes(linked, vec![KeyValue::new(LINK_ATTRIBUTE, ARRIVAL)]);
        }
    }
}

/// The `traceparent` of `span_context`, version `00`: only the sampled flag is kept, as the
/// W3C recommendation asks of flags a version does not define.
fn traceparent(span_context: &SpanContext) -> String {
    let flags = (span_context.trace_flags() & TraceFlags::SAMPLED).to_u8();
    format!("00-{}-{}-{flags:02x}", span_context.trace_id(), span_context.span_id())
}

/// The remote span context of a W3C `traceparent`; `None` unless it is well formed, with a
/// trace id and a span id that are not all zeros. A version above `00` is read as `00` is,
/// ignoring what follows the flags (as the recommendation asks); version `ff` is invalid.
fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().splitn(5, '-');
    let version = parts.next().filter(|v| is_hex(v, 2))?;
    let trace_id = parts.next().filter(|t| is_hex(t, 32))?;
    let span_id = parts.next().filter(|s| is_hex(s, 16))?;
    let flags = parts.next().filter(|f| is_hex(f, 2))?;
    let rest = parts.next();
    match (version, rest) {
        ("ff", _) | ("00", Some(_)) => return None,
        _ => {}
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?) & TraceFlags::SAMPLED;
    let span_context = SpanContext::new(trace_id, span_id, flags, true, TraceState::NONE);
    span_context.is_valid().then_some(span_context)
}

/// Whether `s` is `len` lowercase hexadecimal digits.
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_back_as_the_remote_span_context_it_was_written_from() {
        let read = parse_traceparent(TRACEPARENT);
        let Some(read) = read else { panic!("{TRACEPARENT} is valid") };
        assert_eq!(read.trace_id(), TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736));
        assert_eq!(read.span_id(), SpanId::from(0x00f0_67aa_0ba9_02b7));
        assert!(read.is_sampled());
        assert!(read.is_remote());
        assert_eq!(traceparent(&read), TRACEPARENT);
        let unsampled = parse_traceparent(&TRACEPARENT.replace("-01", "-00"));
        assert!(unsampled.is_some_and(|c| !c.is_sampled()));
    }

    #[test]
    fn only_the_sampled_flag_is_kept() {
        let read = parse_traceparent(&TRACEPARENT.replace("-01", "-ff"));
        assert!(read.is_some_and(|c| c.trace_flags() == TraceFlags::SAMPLED));
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = TRACEPARENT.replacen("00-", "cc-", 1);
        assert!(parse_traceparent(&later).is_some());
        assert!(parse_traceparent(&format!("{later}-what-follows")).is_some());
    }

    #[test]
    fn a_malformed_traceparent_is_none() {
        let zeros_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zeros_span = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        for bad in [
            "",
            "garbage",
            zeros_trace,
            zeros_span,
            &TRACEPARENT.replacen("00-", "ff-", 1),
            &TRACEPARENT.to_uppercase(),
            &format!("{TRACEPARENT}-extra"),
            &TRACEPARENT[..TRACEPARENT.len() - 1],
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_span_without_an_opentelemetry_layer_keeps_nothing() {
        let span = tracing::info_span!("botmesh.message");
        assert_eq!(W3cPropagation::new().inject(&span), None);
        // And linking it does nothing, without failing.
        W3cPropagation::new().link(&span, TRACEPARENT);
    }
}
