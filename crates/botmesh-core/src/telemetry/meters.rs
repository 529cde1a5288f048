//! The metric handles a bot takes once, when it is built, so that the message path records
//! without looking a metric up by name each time.

use std::sync::atomic::{AtomicUsize, Ordering};

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use super::{
    CONVERSATIONS, ERRORS, HANDOFFS, JOURNAL_BACKLOG, LEADER, LEADERSHIP_CHANGES, LEASE_LOSSES,
    MESSAGES_DEDUPLICATED, MESSAGES_FAILED, MESSAGES_HANDLED, MESSAGES_RECEIVED, OUTBOX_BACKLOG,
    QUEUE_DEPTH, TAKEOVERS, TURN_HOLD, TURN_WAIT,
};
use crate::{BotError, Event, FollowReason};

/// The tally of journal writes waiting in the repair queue.
pub(crate) fn journal_backlog() -> Tally {
    Tally::new(gauge!(JOURNAL_BACKLOG))
}

/// A count kept readable (for the replica's status) and as a gauge.
pub(crate) struct Tally {
    count: AtomicUsize,
    gauge: Gauge,
}

impl Tally {
    pub(crate) fn new(gauge: Gauge) -> Self {
        Self { count: AtomicUsize::new(0), gauge }
    }

    pub(crate) fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::Relaxed);
        self.gauge.increment(n as f64);
    }

    pub(crate) fn sub(&self, n: usize) {
        self.count.fetch_sub(n, Ordering::Relaxed);
        self.gauge.decrement(n as f64);
    }

    pub(crate) fn set(&self, n: usize) {
        self.count.store(n, Ordering::Relaxed);
        self.gauge.set(n as f64);
    }

    pub(crate) fn get(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Counts one until the guard is dropped, however the work holding it ends.
    pub(crate) fn hold(&self) -> Held<'_> {
        self.add(1);
        Held(self)
    }
}

/// One counted in a [`Tally`] while it lives.
pub(crate) struct Held<'a>(&'a Tally);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.sub(1);
    }
}

/// The message counters of one provider.
#[derive(Clone)]
pub(crate) struct ProviderMeters {
    pub(crate) received: Counter,
    pub(crate) handled: Counter,
    pub(crate) failed: Counter,
    pub(crate) deduplicated: Counter,
}

impl ProviderMeters {
    fn new(provider: &str) -> Self {
        let provider = provider.to_owned();
        Self {
            received: counter!(MESSAGES_RECEIVED, "provider" => provider.clone()),
            handled: counter!(MESSAGES_HANDLED, "provider" => provider.clone()),
            failed: counter!(MESSAGES_FAILED, "provider" => provider.clone()),
            deduplicated: counter!(MESSAGES_DEDUPLICATED, "provider" => provider),
        }
    }
}

/// A bot's metric handles.
pub(crate) struct Meters {
    /// Per provider id, in the bot's order (a handful: a scan beats hashing).
    providers: Vec<(String, ProviderMeters)>,
    /// For a message naming a provider the bot does not have (a test's, a replay's).
    other: ProviderMeters,
    pub(crate) turn_wait: Histogram,
    pub(crate) turn_hold: Histogram,
    pub(crate) queue_depth: Gauge,
    pub(crate) conversations: Tally,
    pub(crate) outbox_backlog: Tally,
}

impl Meters {
    /// Takes the handles from the recorder installed now, for providers `providers`.
    pub(crate) fn new<'a>(providers: impl Iterator<Item = &'a str>) -> Self {
        Self {
            providers: providers.map(|p| (p.to_owned(), ProviderMeters::new(p))).collect(),
            other: ProviderMeters::new("other"),
            turn_wait: histogram!(TURN_WAIT),
            turn_hold: histogram!(TURN_HOLD),
            queue_depth: gauge!(QUEUE_DEPTH),
            conversations: Tally::new(gauge!(CONVERSATIONS)),
            outbox_backlog: Tally::new(gauge!(OUTBOX_BACKLOG)),
        }
    }

    /// The counters of provider `id`.
    pub(crate) fn provider(&self, id: &str) -> &ProviderMeters {
        self.providers.iter().find(|(p, _)| p == id).map_or(&self.other, |(_, m)| m)
    }
}

/// Counts what an event tells: hand-offs, takeovers, lost leases, leadership, errors.
pub(crate) fn observe(event: &Event) {
    match event {
        Event::TakenOver { .. } => counter!(TAKEOVERS).increment(1),
        Event::Handover { outcome, .. } => {
            counter!(HANDOFFS, "outcome" => outcome.as_str()).increment(1);
        }
        Event::LeaseLost { reason, .. } => {
            counter!(LEASE_LOSSES, "reason" => reason.as_str()).increment(1);
        }
        Event::Leader { name, .. } => {
            if let Some(transport) = name.strip_prefix("provider:") {
                let transport = transport.to_owned();
                counter!(LEADERSHIP_CHANGES, "transport" => transport.clone(), "change" => "gained")
                    .increment(1);
                gauge!(LEADER, "transport" => transport).set(1.0);
            }
        }
        Event::Follower { name, reason } => {
            if let Some(transport) = name.strip_prefix("provider:") {
                let transport = transport.to_owned();
                // A standby that never led changes nothing.
                if !matches!(reason, FollowReason::Standby) {
                    counter!(LEADERSHIP_CHANGES, "transport" => transport.clone(), "change" => "lost")
                        .increment(1);
                }
                gauge!(LEADER, "transport" => transport).set(0.0);
            }
        }
        Event::Error { error, .. } => {
            counter!(ERRORS, "kind" => BotError::label(error)).increment(1);
        }
        _ => {}
    }
}
