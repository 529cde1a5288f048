//! `W3cPropagation` with a real OpenTelemetry pipeline: `tracing-opentelemetry` over an SDK
//! tracer exporting to memory, two replicas on the in-memory hub sharing one store. Each
//! message is one trace, its context kept with its journal record; a message taken over from
//! a replica that died gets a span of its own there, linked to the one it had where it arrived.
#![cfg(feature = "opentelemetry")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::JournalStore as _;
use botmesh_core::{Bot, BotError, Durability, Inbound, MemoryStore};
use botmesh_ops::otel::{ARRIVAL, LINK_ATTRIBUTE, W3cPropagation};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::sync::Notify;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt as _;

const LEASE: Duration = Duration::from_secs(1);

/// Installs, for this thread, `tracing-opentelemetry` over an SDK tracer that exports every
/// span to memory as it ends.
fn pipeline() -> (InMemorySpanExporter, SdkTracerProvider, DefaultGuard) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("botmesh-ops-test"));
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    (exporter, provider, guard)
}

struct Replica {
    bot: Bot,
    provider: TestProvider,
    coordinator: Arc<MemoryCoordinator>,
    incarnation: String,
}

/// Replicas `names` of a durable echo bot with the propagation, on one hub and one store. A
/// message saying "stuck" blocks its handler on replica `a` until `gate` is notified.
async fn replicas(
    names: &[&'static str],
    store: &Arc<MemoryStore>,
    gate: &Arc<Notify>,
) -> Vec<Replica> {
    let hub = MemoryCoordinationHub::new();
    let mut out = Vec::new();
    for &name in names {
        let provider = TestProvider::new();
        let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), name).with_lease(LEASE));
        let gate = Arc::clone(gate);
        let bot = Bot::builder()
            .provider(provider.clone())
            .store(store.clone())
            .coordination(CoordinationConfig::new(coordinator.clone()).build())
            .durability(Durability::new())
            .trace_propagation(W3cPropagation::new())
            .on_message(move |ctx| {
                let gate = Arc::clone(&gate);
                async move {
                    if name == "a" && ctx.body() == "stuck" {
                        gate.notified().await;
                    }
                    ctx.reply(format!("{name}: {}", ctx.body())).await?;
                    Ok::<_, BotError>(())
                }
            })
            .build()
            .expect("the bot builds");
        bot.start().await.expect("the bot starts");
        let incarnation = bot.status().incarnation.clone();
        out.push(Replica { bot, provider, coordinator, incarnation });
    }
    out
}

/// The string value of attribute `key` of `span`.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The `botmesh.message` spans, by message id and replica.
fn message_spans(spans: &[SpanData]) -> HashMap<(String, String), Vec<&SpanData>> {
    let mut out: HashMap<_, Vec<_>> = HashMap::new();
    for span in spans.iter().filter(|s| s.name == "botmesh.message") {
        let id = attr(span, "message.id").expect("a message id");
        let replica = attr(span, "replica").expect("a replica");
        out.entry((id, replica)).or_default().push(span);
    }
    out
}

/// The spans under `root`, at any depth.
fn descendants<'a>(spans: &'a [SpanData], root: &SpanData) -> Vec<&'a SpanData> {
    let mut out = Vec::new();
    let mut parents = vec![root.span_context.span_id()];
    while let Some(parent) = parents.pop() {
        for span in spans.iter().filter(|s| s.parent_span_id == parent) {
            parents.push(span.span_context.span_id());
            out.push(span);
        }
    }
    out
}

/// `span` is a root, and everything under it is in its trace; the names of its children.
fn one_trace(spans: &[SpanData], span: &SpanData) -> Vec<String> {
    assert_eq!(span.parent_span_id, SpanId::INVALID, "a message is a root: {span:#?}");
    let trace = span.span_context.trace_id();
    let under = descendants(spans, span);
    for child in &under {
        assert_eq!(child.span_context.trace_id(), trace, "one trace per message: {child:#?}");
    }
    let id = span.span_context.span_id();
    under.iter().filter(|s| s.parent_span_id == id).map(|s| s.name.to_string()).collect()
}

/// The trace context kept with journal record `id`.
async fn journaled_trace(store: &MemoryStore, id: &str) -> Option<String> {
    let record = store.inbox_get(id).await.unwrap().expect("the record is remembered");
    let payload: serde_json::Value = serde_json::from_str(&record.payload).unwrap();
    payload.get("trace").and_then(|t| t.as_str()).map(str::to_owned)
}

fn traceparent(trace: TraceId, span: SpanId) -> String {
    format!("00-{trace}-{span}-01")
}

#[tokio::test(start_paused = true)]
async fn each_message_is_one_trace_whose_context_its_journal_record_keeps() {
    let (exporter, _provider, _default) = pipeline();
    let store = Arc::new(MemoryStore::new());
    let gate = Arc::new(Notify::new());
    let replicas = replicas(&["a", "b"], &store, &gate).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    for (at, id, chat) in [(a, "m1", "u1"), (a, "m2", "u1"), (b, "m3", "u2"), (b, "m4", "u3")] {
        assert!(at.provider.inject(Inbound::text("test", id, chat, "hello")));
    }
    a.provider.wait_sent(2).await;
    b.provider.wait_sent(2).await;
    for r in &replicas {
        r.bot.wait_idle().await;
    }
    // The spans end as the chats' workers finish.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let spans = exporter.get_finished_spans().unwrap();
    let messages = message_spans(&spans);
    let mut seen: Vec<(&str, &str)> =
        messages.keys().map(|(id, replica)| (id.as_str(), replica.as_str())).collect();
    seen.sort_unstable();
    let (ia, ib) = (a.incarnation.as_str(), b.incarnation.as_str());
    assert_eq!(seen, [("m1", ia), ("m2", ia), ("m3", ib), ("m4", ib)], "where each was handled");
    let mut traces = HashSet::new();
    for ((id, _), found) in &messages {
        let [span] = found.as_slice() else { panic!("one span for {id}: {found:#?}") };
        assert_eq!(attr(span, "outcome").as_deref(), Some("handled"));
        assert_eq!(attr(span, "taken_from"), None);
        let children = one_trace(&spans, span);
        for step in ["journal", "turn.wait", "handle", "finish"] {
            assert!(children.iter().any(|c| c == step), "{step} is in {id}'s span: {children:?}");
        }
        assert!(traces.insert(span.span_context.trace_id()), "a trace of its own: {id}");
        // What the journal keeps is the span's context.
        let (trace, span_id) = (span.span_context.trace_id(), span.span_context.span_id());
        let kept = journaled_trace(&store, &format!("test:{id}")).await;
        assert_eq!(kept, Some(traceparent(trace, span_id)), "{id}");
    }
    for r in &replicas {
        r.bot.stop().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_taken_over_from_a_dead_replica_links_to_its_span_where_it_arrived() {
    let (exporter, _provider, _default) = pipeline();
    let store = Arc::new(MemoryStore::new());
    let gate = Arc::new(Notify::new());
    let replicas = replicas(&["a", "b"], &store, &gate).await;
    let (a, b) = (&replicas[0], &replicas[1]);

    // s1 arrives at a, whose handler blocks on it; a dies holding it.
    assert!(a.provider.inject(Inbound::text("test", "s1", "u9", "stuck")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // a's span for s1 is still open; what ended under it names it.
    let before = exporter.get_finished_spans().unwrap();
    let journal = before.iter().find(|s| s.name == "journal").expect("s1's journal span at a");
    let (a_trace, a_span) = (journal.span_context.trace_id(), journal.parent_span_id);
    assert!(before.iter().all(|s| s.span_context.trace_id() == a_trace), "{before:#?}");
    assert_eq!(journaled_trace(&store, "test:s1").await, Some(traceparent(a_trace, a_span)));
    a.coordinator.crash();

    // The chat's next message, at b: it waits out a's lease, then takes s1 over before it.
    assert!(b.provider.inject(Inbound::text("test", "s2", "u9", "next")));
    tokio::time::timeout(LEASE * 6, b.provider.wait_sent(2)).await.expect("b answered both");
    assert_eq!(b.provider.texts_to("u9"), ["b: stuck", "b: next"]);
    b.bot.wait_idle().await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let spans = exporter.get_finished_spans().unwrap();
    let messages = message_spans(&spans);
    let (ia, ib) = (a.incarnation.clone(), b.incarnation.clone());
    let one = |id: &str, replica: &str| -> &SpanData {
        let found = messages.get(&(id.to_owned(), replica.to_owned()));
        let Some([span]) = found.map(Vec::as_slice) else {
            panic!("one span for {id}: {found:#?}")
        };
        span
    };
    let taken = one("s1", &ib);
    let own = one("s2", &ib);
    assert_eq!(attr(taken, "taken_from"), Some(ia.clone()), "{taken:#?}");
    assert_eq!(attr(taken, "outcome").as_deref(), Some("handled"));
    assert_eq!(attr(own, "taken_from"), None);
    // Each its own trace, and neither a's.
    let children = one_trace(&spans, taken);
    assert!(children.iter().any(|c| c == "handle"), "s1 is handled in its span: {children:?}");
    let children = one_trace(&spans, own);
    for step in ["journal", "turn.wait", "handle", "finish"] {
        assert!(children.iter().any(|c| c == step), "{step} is in s2's span: {children:?}");
    }
    let traces: HashSet<TraceId> =
        [a_trace, taken.span_context.trace_id(), own.span_context.trace_id()].into();
    assert_eq!(traces.len(), 3, "a trace per message and replica");
    // The link: to a's span for s1, remote, marked as the message's arrival.
    let link = taken
        .links
        .iter()
        .find(|l| l.span_context.trace_id() == a_trace && l.span_context.span_id() == a_span)
        .unwrap_or_else(|| panic!("s1's span at b links to its span at a: {:#?}", taken.links));
    assert!(link.span_context.is_remote());
    let marked = |kv: &KeyValue| kv.key.as_str() == LINK_ATTRIBUTE && kv.value.as_str() == ARRIVAL;
    assert!(link.attributes.iter().any(marked), "{link:#?}");
    // b's own message links to nothing of a's.
    assert!(own.links.iter().all(|l| l.span_context.trace_id() != a_trace), "{:#?}", own.links);

    // a's handler, let go, ends its span for s1: the one b's links to, in the trace the
    // journal record named.
    gate.notify_waiters();
    for r in &replicas {
        let _ = r.bot.stop().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let spans = exporter.get_finished_spans().unwrap();
    let messages = message_spans(&spans);
    let found = messages.get(&("s1".to_owned(), ia));
    let Some([at_a]) = found.map(Vec::as_slice) else { panic!("one span for s1 at a: {found:#?}") };
    assert_eq!((at_a.span_context.trace_id(), at_a.span_context.span_id()), (a_trace, a_span));
    assert_eq!(one_trace(&spans, at_a).iter().filter(|c| *c == "journal").count(), 1);
    assert_eq!(messages.len(), 3, "s1 at a and at b, s2 at b: {:?}", messages.keys());
    assert!(a.provider.sent().is_empty(), "a, taken for dead, sent nothing");
}
