//! One span per message, from arrival to acknowledgement, read by a capturing `tracing` layer:
//! a root per message with its fields, the journal, ticket, turn wait, handling (with the
//! send inside) and finish as its children, closed last; a taken-over message gets a span of
//! its own on the replica that took it over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::{BotError, Inbound};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::support::{replicas, replicas_with};

const LEASE: Duration = Duration::from_secs(1);

/// A span as the layer saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    parent: Option<usize>,
    /// The spans it follows from.
    follows: Vec<usize>,
    fields: HashMap<String, String>,
    /// When it closed, as a position in the order of closes.
    closed: Option<usize>,
}

#[derive(Default)]
struct Log {
    spans: Vec<Seen>,
    /// Live span ids to their index in `spans` (ids are reused once a span closed).
    live: HashMap<u64, usize>,
    closes: usize,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Log>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        let parent = attrs
            .parent()
            .cloned()
            .or_else(|| attrs.is_contextual().then(|| ctx.current_span().id().cloned()).flatten())
            .and_then(|p| log.live.get(&p.into_u64()).copied());
        let mut seen = Seen { name: attrs.metadata().name().to_owned(), parent, ..Seen::default() };
        attrs.record(&mut Fields(&mut seen.fields));
        log.spans.push(seen);
        let at = log.spans.len() - 1;
        log.live.insert(id.into_u64(), at);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        if let Some(&at) = log.live.get(&id.into_u64()) {
            values.record(&mut Fields(&mut log.spans[at].fields));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        let (Some(&at), Some(&from)) =
            (log.live.get(&id.into_u64()), log.live.get(&follows.into_u64()))
        else {
            return;
        };
        log.spans[at].follows.push(from);
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        if let Some(at) = log.live.remove(&id.into_u64()) {
            log.closes += 1;
            log.spans[at].closed = Some(log.closes);
        }
    }
}

impl Capture {
    fn spans(&self) -> Vec<Seen> {
        self.0.lock().unwrap().spans.clone()
    }
}

/// The spans whose parent is `parent`.
fn children(spans: &[Seen], parent: usize) -> Vec<&Seen> {
    spans.iter().filter(|s| s.parent == Some(parent)).collect()
}

/// Whether span `at` has a descendant named `name`.
fn has_descendant(spans: &[Seen], at: usize, name: &str) -> bool {
    spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.parent == Some(at))
        .any(|(i, s)| s.name == name || has_descendant(spans, i, name))
}

#[tokio::test]
async fn each_message_is_one_span_from_its_arrival_to_its_acknowledgement() {
    let capture = Capture::default();
    let _default = subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let replicas = replicas(&["a"], LEASE).await;
    let a = &replicas[0];
    let incarnation = a.bot.status().incarnation;
    for (id, chat) in [("m1", "u1"), ("m2", "u1"), ("m3", "u2")] {
        assert!(a.web.inject(Inbound::text("web", id, chat, "hello")));
    }
    a.web.wait_sent(3).await;
    a.bot.wait_idle().await;
    // The spans close as the workers finish; the chats' workers end once idle.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let spans = capture.spans();
    let messages: Vec<(usize, &Seen)> =
        spans.iter().enumerate().filter(|(_, s)| s.name == "botmesh.message").collect();
    assert_eq!(messages.len(), 3, "one span per message: {messages:#?}");
    let mut ids: Vec<&str> =
        messages.iter().map(|(_, s)| s.fields["message.id"].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    for (at, span) in &messages {
        assert_eq!(span.parent, None, "a message is a trace of its own");
        let field = |name: &str| span.fields.get(name).map(String::as_str);
        assert_eq!(field("provider"), Some("web"));
        assert!(field("chat").is_some_and(|c| c.ends_with("u1") || c.ends_with("u2")), "{span:?}");
        assert_eq!(field("replica"), Some(incarnation.as_str()));
        assert!(
            field("fence").is_some_and(|f| f.parse::<u64>().is_ok()),
            "the turn's fence: {span:?}"
        );
        assert_eq!(field("outcome"), Some("handled"));
        let kids = children(&spans, *at);
        let names: Vec<&str> = kids.iter().map(|s| s.name.as_str()).collect();
        for step in ["journal", "turn.wait", "handle", "finish"] {
            assert!(names.contains(&step), "{step} is inside the message's span: {names:?}");
        }
        // Messages of a chat that arrived together take their tickets in one call, inside the
        // first one's span and following from the others'.
        let ticketed = names.contains(&"ticket")
            || spans.iter().any(|s| s.name == "ticket" && s.follows.contains(at));
        assert!(ticketed, "no ticket span for {span:?}");
        assert!(has_descendant(&spans, *at, "send"), "the reply is sent inside it");
        // It closes last: after the acknowledgement and the release.
        let closed = span.closed.expect("the span closed");
        assert!(kids.iter().all(|k| k.closed.is_some_and(|c| c < closed)), "{kids:#?}");
    }
    a.bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_taken_over_from_a_crashed_replica_gets_a_span_there_naming_where_it_came_from() {
    let capture = Capture::default();
    let _default = subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    // At replica a, the chat's first message never gets past the hook.
    let blocked = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::clone(&blocked);
    let replicas = replicas_with(&["a", "b"], LEASE, move |name, b| {
        let gate = Arc::clone(&gate);
        b.before_message(move |message| {
            let gate = Arc::clone(&gate);
            async move {
                if name == "a" && message.body == "stuck" {
                    gate.notified().await;
                }
                Ok::<_, BotError>(message)
            }
        })
    })
    .await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let from = a.bot.status().incarnation;
    assert!(a.web.inject(Inbound::text("web", "s1", "u9", "stuck")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.coordinator.crash();
    // The chat's next message, at the other replica: it waits out the dead holder's lease,
    // then takes the first message over before its own.
    assert!(b.web.inject(Inbound::text("web", "s2", "u9", "next")));
    tokio::time::timeout(LEASE * 6, b.web.wait_sent(2)).await.expect("b answered both");
    tokio::time::sleep(Duration::from_millis(100)).await;

    let spans = capture.spans();
    let at_b: Vec<&Seen> = spans
        .iter()
        .filter(|s| s.name == "botmesh.message" && s.fields.get("replica") != Some(&from))
        .collect();
    let taken = at_b.iter().find(|s| s.fields["message.id"] == "s1").expect("a span for s1 at b");
    // Claimed from the dead replica, or from `released` if it handed the message back first.
    let taken_from = taken.fields.get("taken_from").map(String::as_str);
    assert!(taken_from == Some(from.as_str()) || taken_from == Some("released"), "{taken:?}");
    assert_eq!(taken.parent, None);
    assert_eq!(taken.fields.get("outcome").map(String::as_str), Some("handled"));
    let own = at_b.iter().find(|s| s.fields["message.id"] == "s2").expect("a span for s2 at b");
    assert_eq!(own.fields.get("taken_from"), None);
    // At a, s1 had its own span, from its arrival.
    assert!(spans.iter().any(|s| s.name == "botmesh.message"
        && s.fields.get("replica") == Some(&from)
        && s.fields["message.id"] == "s1"));
    blocked.notify_waiters();
    for r in &replicas {
        let _ = r.bot.stop().await;
    }
}
