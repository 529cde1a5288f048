//! Durability: its settings, the inbox journal written on arrival, adopting and claiming
//! pending records, acknowledgements and releases.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{ChatKey, Error, Inbound, InboxAppend, InboxRecord, InboxState, Verdict};
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use tracing::{Instrument, Span};

use crate::coordination::{Claim, RELEASED, Taken};
use crate::repair::Repair;
use crate::shared::Shared;
use crate::{BotError, Event};

/// Inbound messages journaled in the store, taken over when their replica dies, and sends
/// deduplicated through the outbox.
///
/// Needs a store with the journal (every backend of botmesh has one); it is shared by the
/// replicas with Redis, Postgres, MySQL and MongoDB.
///
/// With the `serde` feature it reads from a configuration file, durations as text; what the
/// file leaves out keeps the defaults of [`Durability::new`], and an unknown key is an error:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// let durability: botmesh_core::Durability =
///     serde_json::from_str(r#"{ "retain": "12h", "max_attempts": 5 }"#).unwrap();
/// # }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[must_use = "settings do nothing until given to `BotBuilder::durability`"]
pub struct Durability {
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub(crate) retain: Duration,
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub(crate) outbox_ttl: Duration,
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub(crate) mark_within: Duration,
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub(crate) replay_every: Duration,
    #[cfg_attr(feature = "serde", serde(deserialize_with = "at_least_one"))]
    pub(crate) max_attempts: u32,
}

/// `max_attempts` from a file: at least one, as [`Durability::max_attempts`] makes it.
#[cfg(feature = "serde")]
fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    u32::deserialize(d).map(|n| n.max(1))
}

impl Default for Durability {
    fn default() -> Self {
        Self::new()
    }
}

impl Durability {
    /// A day of dedupe memory and outbox records, a handler's outbox marks written 20 ms after
    /// its send when its message still runs, a replay sweep every second, and up to three
    /// attempts per message.
    pub fn new() -> Self {
        Self {
            retain: Duration::from_secs(24 * 3600),
            outbox_ttl: Duration::from_secs(24 * 3600),
            mark_within: Duration::from_millis(20),
            replay_every: Duration::from_secs(1),
            max_attempts: 3,
        }
    }

    /// How long a handled message's id is remembered to drop retries of it.
    pub fn retain(mut self, retain: Duration) -> Self {
        self.retain = retain;
        self
    }

    /// How long a send stays recorded in the outbox.
    pub fn outbox_ttl(mut self, ttl: Duration) -> Self {
        self.outbox_ttl = ttl;
        self
    }

    /// How long a handler's send waits for its outbox mark to be written while its message
    /// still runs.
    ///
    /// The mark lets a later run of the message skip the send, and a handler's message runs
    /// again only while it is pending: handed back, or left by a replica that died. So a
    /// message whose handlers end cleanly within this time is acknowledged with no mark
    /// written, one that is handed back writes its marks first, and one still running this
    /// long after a send writes them then. A replica that dies before a mark is written leaves
    /// the send to go out again from the replica that takes the message over; this widens
    /// that window by `within` at most. `Duration::ZERO` writes each mark right after its
    /// send. A flow's or conversation's send is always marked at once: its step can run
    /// again from a checkpoint after its message was acknowledged.
    pub fn mark_within(mut self, within: Duration) -> Self {
        self.mark_within = within;
        self
    }

    /// How often a replica looks for messages journaled by a replica that died.
    pub fn replay_every(mut self, every: Duration) -> Self {
        self.replay_every = every;
        self
    }

    /// How many times one message is handled at most (a message whose effect could not be
    /// stored is handled again); after that it is acknowledged and reported.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }
}

/// The journal's dedupe id of an inbound message: its provider and its id.
pub(crate) fn journal_id(inbound: &Inbound) -> String {
    let mut id = String::with_capacity(journal_id_len(inbound));
    push_journal_id(&mut id, inbound);
    id
}

/// The length of [`journal_id`]'s answer for `inbound`.
pub(crate) fn journal_id_len(inbound: &Inbound) -> usize {
    inbound.provider.len() + 1 + inbound.id.as_str().len()
}

/// Writes [`journal_id`]'s answer for `inbound` at the end of `out`.
pub(crate) fn push_journal_id(out: &mut String, inbound: &Inbound) {
    out.push_str(&inbound.provider);
    out.push(':');
    out.push_str(inbound.id.as_str());
}

/// What journaling said about one message.
pub(crate) enum Journaled {
    /// Journaled now, under this id.
    New(String),
    /// Already journaled and pending, and now this replica's: a sender's retry of a message
    /// whose first delivery was refused or went to a replica that died.
    Adopted(String),
    /// Already journaled (a retry of a message this or another replica has).
    Duplicate,
    /// Already journaled and pending under a live replica, which may be handling it.
    Elsewhere,
    /// The journal could not be written: the message is handled without it.
    Failed,
}

/// A journal record's payload: the message, and the trace context of its span where it
/// arrived (see [`TracePropagation`](crate::telemetry::TracePropagation)). Replicas read the
/// payload as an [`Inbound`], which ignores the extra field.
#[derive(Serialize)]
struct Payload<'a> {
    #[serde(flatten)]
    message: &'a Inbound,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
}

/// The trace context a payload keeps, if any.
#[derive(Deserialize)]
struct TraceOf {
    #[serde(default)]
    trace: Option<String>,
}

/// The journal record of `inbound`, a message of chat `key` whose span is `span`.
pub(crate) fn record(
    shared: &Shared,
    key: &ChatKey,
    inbound: &Inbound,
    span: &Span,
) -> Result<InboxRecord, Error> {
    let trace = shared.propagation.as_ref().and_then(|p| p.inject(span));
    // Sized for a text message in one allocation: the field names and a timestamp take about
    // 170 bytes besides the strings counted here.
    let len = |s: Option<&str>| s.map_or(0, str::len);
    let strings = inbound.id.as_str().len()
        + inbound.chat.as_str().len()
        + inbound.provider.len()
        + len(inbound.content.as_text())
        + len(inbound.participant.as_deref())
        + len(inbound.sender_name.as_deref())
        + len(trace.as_deref());
    let mut payload = Vec::with_capacity(192 + strings);
    serde_json::to_writer(&mut payload, &Payload { message: inbound, trace })
        .map_err(|e| Error::corrupt("an inbound message", e))?;
    // serde_json writes UTF-8 only.
    let payload =
        String::from_utf8(payload).map_err(|e| Error::corrupt("an inbound message", e))?;
    Ok(InboxRecord::pending(journal_id(inbound), key.as_str(), payload, &shared.owner))
}

/// Journals messages of chat `key` that arrived together, in one concurrent batch of appends,
/// each in a `journal` span inside its message's span.
pub(crate) async fn journal<'a>(
    shared: &Shared,
    key: &ChatKey,
    messages: impl Iterator<Item = (&'a Inbound, &'a Span)>,
) -> Vec<Journaled> {
    let Some(durability) = &shared.durability else { return Vec::new() };
    let appends = messages.map(|(inbound, span)| {
        let append = async move {
            let record = match record(shared, key, inbound, span) {
                Ok(record) => record,
                Err(e) => return (journal_id(inbound), Err(e)),
            };
            let appended =
                async { shared.inbox()?.inbox_append(&record, durability.retain).await }.await;
            (record.id, appended)
        };
        append.instrument(tracing::debug_span!(target: "botmesh", parent: span, "journal"))
    });
    let results = join_all(appends).await;
    let mut out = Vec::with_capacity(results.len());
    for (id, appended) in results {
        out.push(match appended {
            Ok(InboxAppend::Appended) => Journaled::New(id),
            Ok(InboxAppend::Duplicate { state: InboxState::Pending }) => adopt(shared, id).await,
            Ok(_) => Journaled::Duplicate,
            Err(e) => {
                shared.events.error(None, e.into());
                Journaled::Failed
            }
        });
    }
    out
}

/// Journals `inbound`, which this replica will not handle, as released: the chat's next holder
/// claims it before its own message, and a quiet chat's is found by the replay sweep (or, for
/// a single process, at its next start). The verdict says whether it is safe: `Queued` once
/// appended, `Duplicate` when the journal had it already.
pub(crate) async fn keep(shared: &Shared, inbound: &Inbound) -> Result<Verdict, Error> {
    let Some(durability) = &shared.durability else {
        return Ok(Verdict::Unavailable);
    };
    let key = inbound.key();
    let mut record = record(shared, &key, inbound, &Span::none())?;
    record.owner = RELEASED.to_owned();
    match shared.inbox()?.inbox_append(&record, durability.retain).await? {
        InboxAppend::Appended => {
            tracing::info!(target: "botmesh", key = %key, id = %inbound.id, "kept in the journal for the chat's next holder");
            Ok(Verdict::Queued)
        }
        _ => Ok(Verdict::Duplicate),
    }
}

/// A delivery of a message the journal has pending already: the sender delivers it again
/// because nobody acknowledged it. When the replica that journaled it refused it (its append
/// timed out, then landed, and was released) or died, this one takes it over and handles it;
/// a live owner keeps it.
pub(crate) async fn adopt(shared: &Shared, id: String) -> Journaled {
    let record = match async { shared.inbox()?.inbox_get(&id).await }.await {
        Ok(Some(record)) => record,
        Ok(None) => return Journaled::Duplicate,
        Err(e) => {
            shared.events.error(None, e.into());
            return Journaled::Failed;
        }
    };
    if record.state != InboxState::Pending {
        return Journaled::Duplicate;
    }
    if record.owner == shared.owner {
        // An earlier delivery was refused here, but its append landed: this one takes it.
        shared.repairs.taken_here(&id).await;
        return Journaled::Adopted(id);
    }
    if record.owner != RELEASED {
        // Its owner may be handling it right now: only a dead owner's is taken.
        let dead = match &shared.coordination {
            Some(c) => match c.is_alive(&record.owner).await {
                Ok(alive) => !alive,
                Err(e) => {
                    shared.events.error(None, e.into());
                    return Journaled::Failed;
                }
            },
            None => false,
        };
        if !dead {
            return Journaled::Elsewhere;
        }
    }
    // Taken here from now on: a release watcher left from an earlier refused delivery of it
    // must not hand it back (see `release_if_landed`).
    shared.repairs.taken_here(&id).await;
    match async { shared.inbox()?.inbox_claim(&id, &record.owner, &shared.owner).await }.await {
        Ok(true) => Journaled::Adopted(id),
        Ok(false) => Journaled::Duplicate,
        Err(e) => {
            shared.events.error(None, e.into());
            Journaled::Failed
        }
    }
}

/// Claims pending `record` from its owner for this replica and reads its message back,
/// reporting it as taken over. A claim refused because the record moved since it was listed is
/// looked at again: acknowledged, it is gone; released, it is claimed from there; otherwise
/// another replica holds it.
pub(crate) async fn claim(shared: &Shared, record: &InboxRecord) -> Claim {
    let mut from = record.owner.clone();
    loop {
        match async { shared.inbox()?.inbox_claim(&record.id, &from, &shared.owner).await }.await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                shared.events.error(None, e.into());
                return Claim::Held;
            }
        }
        match async { shared.inbox()?.inbox_get(&record.id).await }.await {
            Ok(Some(now)) if now.state == InboxState::Pending && now.owner == RELEASED => {
                from = RELEASED.to_owned();
            }
            Ok(Some(now)) if now.state == InboxState::Pending => return Claim::Held,
            Ok(_) => return Claim::Gone,
            Err(e) => {
                shared.events.error(None, e.into());
                return Claim::Held;
            }
        }
    }
    match serde_json::from_str::<Inbound>(&record.payload) {
        Ok(inbound) => {
            shared.events.emit(Event::TakenOver {
                key: inbound.key(),
                id: inbound.id.clone(),
                from: record.owner.clone(),
            });
            // Only a payload journaled with a propagation keeps a context.
            let trace = shared
                .propagation
                .as_ref()
                .and_then(|_| serde_json::from_str::<TraceOf>(&record.payload).ok())
                .and_then(|t| t.trace);
            Claim::Claimed(Taken { inbound, from: record.owner.clone(), trace })
        }
        Err(e) => {
            let source = Error::corrupt(format!("journaled message {}", record.id), e);
            shared.events.error(None, BotError::from(source));
            if let Err(e) = async { shared.inbox()?.inbox_ack(&record.id).await }.await {
                shared.events.error(None, e.into());
            }
            Claim::Gone
        }
    }
}

/// Releases journaled message `id`, owned by `from`, for the chat's next holder. When the
/// store cannot take it, the release is reported and queued for repair until it lands.
pub(crate) async fn release(shared: &Arc<Shared>, key: &ChatKey, id: &str, from: &str) {
    if from == RELEASED {
        return;
    }
    if let Err(e) = async { shared.inbox()?.inbox_claim(id, from, RELEASED).await }.await {
        shared.events.error(Some(key), e.into());
        shared.repairs.push(Repair::Release {
            key: key.clone(),
            id: id.to_owned(),
            from: from.to_owned(),
        });
    }
}

/// Releases journaled message `id` if an append this replica gave up on landed after all,
/// so that the sender's next delivery takes it over (see [`adopt`]); the repair queue looks a
/// few times, as the append may sit in a frozen server's buffer for a while.
pub(crate) async fn release_if_landed(shared: &Arc<Shared>, id: String) {
    shared.repairs.watch_landing(id).await;
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn durability_from_a_config_file() {
        let d: Durability = serde_json::from_str(
            r#"{ "retain": "12h", "replay_every": "500ms", "max_attempts": 0 }"#,
        )
        .unwrap();
        assert_eq!(d.retain, Duration::from_secs(12 * 3600));
        assert_eq!(d.replay_every, Duration::from_millis(500));
        assert_eq!(d.outbox_ttl, Durability::new().outbox_ttl, "left out: the default");
        assert_eq!(d.max_attempts, 1, "at least one attempt, as the builder says");
    }

    #[test]
    fn durability_refuses_unknown_keys_and_bare_numbers() {
        assert!(serde_json::from_str::<Durability>(r#"{ "retian": "12h" }"#).is_err());
        assert!(serde_json::from_str::<Durability>(r#"{ "retain": 60 }"#).is_err());
        assert!(serde_json::from_str::<Durability>(r#"{ "retain": "soon" }"#).is_err());
    }
}
