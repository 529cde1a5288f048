//! How a message's trace crosses replicas: the context its span had where it arrived is kept
//! with its journal record, so that the replica that takes it over can link to it.

use tracing::Span;

/// Carries a message's trace context through the inbox journal.
///
/// botmesh depends on no tracing backend. Give the bot an implementation for yours (with
/// `tracing-opentelemetry`: inject the span's OpenTelemetry context as a W3C `traceparent`,
/// and add it as a link; `botmesh-ops` has one behind its `opentelemetry` feature) and every
/// journaled message keeps the context of the span it got on arrival; a replica that takes the
/// message over links its own span for it to that one.
pub trait TracePropagation: Send + Sync + 'static {
    /// The context of `span`, the message's span where it arrived, to keep with its journal
    /// record; `None` keeps nothing. Called once per journaled message: keep it cheap.
    fn inject(&self, span: &Span) -> Option<String>;

    /// Links `span`, the span a taken-over message gets on the replica that took it over, to
    /// `context`, what [`inject`](Self::inject) returned where it arrived. Called once, as
    /// soon as the span is created and before it is first entered, so an implementation may
    /// also set the span's parent instead.
    fn link(&self, span: &Span, context: &str);
}
