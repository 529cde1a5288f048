//! The ticketer: under coordination, the task in front of a chat's worker that journals each
//! message (with durability) and takes the chat's tickets in arrival order, while the worker
//! is still busy with earlier messages, then answers a waiting sender.
//!
//! Where the coordination writes the store's journal itself
//! ([`Coordination::journals`]), a chat's messages are journaled in the call that takes their
//! tickets; otherwise they are journaled first, then ticketed.

use std::sync::Arc;

use botmesh_traits::{ChatKey, Error, InboxState, JournaledTicket, Ticket};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::job::{Job, Journal, Work};
use crate::coordination::Coordination;
use crate::durable::{self, Journaled};
use crate::shared::Shared;

/// What taking a job's ticket came to: `None` for a job that takes none.
type Taken = Option<Result<Ticket, Error>>;

/// Journals the messages among `jobs` (all of chat `key`) that wait for it (in one concurrent
/// batch), marking retries of journaled messages as duplicates.
pub(super) async fn journal_jobs(shared: &Arc<Shared>, key: &ChatKey, jobs: &mut [Box<Job>]) {
    let inbound = jobs.iter().filter(|j| matches!(j.journal, Journal::Pending)).filter_map(|j| {
        match &j.work {
            Work::Message(m) => Some((m, &j.span)),
            Work::Timer { .. } | Work::TakeOver { .. } => None,
        }
    });
    let mut results = durable::journal(shared, key, inbound).await.into_iter();
    for job in jobs.iter_mut().filter(|j| matches!(j.journal, Journal::Pending)) {
        settle(shared, job, results.next()).await;
    }
}

/// Where `job`'s message stands after journaling came to `journaled` (`None`: it could not
/// be journaled).
async fn settle(shared: &Arc<Shared>, job: &mut Job, journaled: Option<Journaled>) {
    job.journal = match journaled {
        Some(Journaled::New(id)) => Journal::Recorded { id, since: Instant::now(), first: true },
        Some(Journaled::Adopted(id)) => {
            Journal::Recorded { id, since: Instant::now(), first: false }
        }
        Some(Journaled::Duplicate) => Journal::Duplicate,
        Some(Journaled::Elsewhere) if job.accepted.is_some() => Journal::Elsewhere,
        Some(Journaled::Elsewhere) => Journal::Duplicate,
        // A sender waiting to acknowledge delivers it again; otherwise it is handled
        // without the journal.
        Some(Journaled::Failed) | None if job.accepted.is_some() => {
            if let Work::Message(m) = &job.work {
                // The append may still land (a timed-out reply): released then, so that
                // the sender's next delivery, wherever it goes, takes it over.
                durable::release_if_landed(shared, durable::journal_id(m)).await;
            }
            Journal::Refused
        }
        Some(Journaled::Failed) | None => Journal::Off,
    };
}

/// Whether `job` takes a ticket: not a message handled elsewhere or delivered again.
fn takes(job: &Job) -> bool {
    !matches!(job.journal, Journal::Duplicate | Journal::Refused | Journal::Elsewhere)
}

/// The span of one ticket call for `jobs`: a child of the first one's span, following from
/// the others'.
fn ticket_span<'a>(mut spans: impl Iterator<Item = &'a Span>, count: usize) -> Span {
    let first = spans.next().cloned().unwrap_or_else(Span::none);
    let span = tracing::debug_span!(target: "botmesh", parent: &first, "ticket", count);
    for other in spans {
        span.follows_from(other);
    }
    span
}

/// Journals `jobs` (with durability) and takes the tickets of those that take one, in one call.
async fn apart(
    shared: &Arc<Shared>,
    coordination: &dyn Coordination,
    key: &ChatKey,
    jobs: &mut [Box<Job>],
) -> Vec<Taken> {
    journal_jobs(shared, key, jobs).await;
    let wanted = jobs.iter().filter(|j| takes(j)).count();
    let taken = match wanted {
        0 => Ok(Vec::new()),
        n => {
            let span = ticket_span(jobs.iter().filter(|j| takes(j)).map(|j| &j.span), n);
            coordination.take_tickets(key, n).instrument(span).await
        }
    };
    let (mut tickets, failure) = match taken {
        Ok(tickets) if tickets.len() == wanted => (tickets.into_iter(), String::new()),
        Ok(_) => (Vec::new().into_iter(), "the backend returned too few tickets".to_owned()),
        Err(e) => (Vec::new().into_iter(), e.to_string()),
    };
    // Each job of a failed call is reported on its own, with the call's error.
    jobs.iter()
        .map(|job| {
            takes(job).then(|| {
                tickets.next().ok_or_else(|| Error::CoordinationUnavailable {
                    reason: failure.clone(),
                    source: None,
                })
            })
        })
        .collect()
}

/// Journals `jobs` (all messages waiting for the journal) and takes their tickets in the same
/// calls, through a coordination that writes the journal. A retry of a message pending in
/// the journal is settled on its own, between the calls before and after it, so that the
/// tickets stay in arrival order. What a failed call leaves goes [`apart`].
async fn together(
    shared: &Arc<Shared>,
    coordination: &dyn Coordination,
    key: &ChatKey,
    jobs: &mut [Box<Job>],
) -> Vec<Taken> {
    let Some(durability) = &shared.durability else {
        return apart(shared, coordination, key, jobs).await;
    };
    let records: Result<Vec<_>, Error> = jobs
        .iter()
        .map(|job| match &job.work {
            Work::Message(m) => durable::record(shared, key, m, &job.span),
            Work::Timer { .. } | Work::TakeOver { .. } => Err(Error::Unsupported { op: "journal" }),
        })
        .collect();
    let Ok(mut records) = records else { return apart(shared, coordination, key, jobs).await };
    let mut taken = Vec::with_capacity(jobs.len());
    let mut start = 0;
    while start < jobs.len() {
        let rest = &records[start..];
        let span = ticket_span(jobs[start..].iter().map(|j| &j.span), rest.len());
        let answers = match coordination
            .take_tickets_journaling(key, rest, durability.retain)
            .instrument(span)
            .await
        {
            Ok(answers) if !answers.is_empty() && answers.len() <= rest.len() => answers,
            _ => {
                taken.extend(apart(shared, coordination, key, &mut jobs[start..]).await);
                return taken;
            }
        };
        let looked = answers.len();
        let answered = jobs[start..].iter_mut().zip(&mut records[start..]);
        for (answer, (job, record)) in answers.into_iter().zip(answered) {
            // A record is not looked at again once answered: its job keeps the id.
            let id = std::mem::take(&mut record.id);
            match answer {
                JournaledTicket::Appended(ticket) => {
                    job.journal = Journal::Recorded { id, since: Instant::now(), first: true };
                    taken.push(Some(Ok(ticket)));
                }
                JournaledTicket::Duplicate { state: InboxState::Pending } => {
                    // A retry of a message pending in the journal: taken over here if its
                    // owner refused it or died, with a ticket of its own.
                    settle(shared, job, Some(durable::adopt(shared, id).await)).await;
                    let ticket = match takes(job) {
                        true => Some(take_one(coordination, key, &job.span).await),
                        false => None,
                    };
                    taken.push(ticket);
                }
                // Acknowledged already: a retry of a message handled before.
                _ => {
                    job.journal = Journal::Duplicate;
                    taken.push(None);
                }
            }
        }
        start += looked;
    }
    taken
}

/// One ticket of chat `key`, for a job whose span is `span`.
async fn take_one(
    coordination: &dyn Coordination,
    key: &ChatKey,
    span: &Span,
) -> Result<Ticket, Error> {
    let span = ticket_span(std::iter::once(span), 1);
    match coordination.take_tickets(key, 1).instrument(span).await {
        Ok(mut tickets) if tickets.len() == 1 => tickets.pop().ok_or_else(too_few),
        Ok(_) => Err(too_few()),
        Err(e) => Err(e),
    }
}

fn too_few() -> Error {
    Error::CoordinationUnavailable {
        reason: "the backend returned too few tickets".to_owned(),
        source: None,
    }
}

/// Journals (with durability) and takes the chat's tickets in arrival order, and passes each
/// job on to the worker. Jobs that arrived together get their tickets in one call; a retry of a
/// journaled message takes none.
pub(super) async fn ticketer(
    shared: Arc<Shared>,
    coordination: Arc<dyn Coordination>,
    key: ChatKey,
    mut rx: mpsc::UnboundedReceiver<Box<Job>>,
    worker: mpsc::UnboundedSender<Box<Job>>,
) {
    /// The most tickets taken in one call.
    const BATCH: usize = 64;
    // Grows to what arrives together, which is most often one job: a ticketer lives as long as
    // its chat's worker, and room for a full batch of jobs came to 32 KB per chat.
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let journaling =
            shared.journaled_turns && batch.iter().all(|j| matches!(j.journal, Journal::Pending));
        let tickets = match journaling {
            true => together(&shared, &*coordination, &key, &mut batch).await,
            false => apart(&shared, &*coordination, &key, &mut batch).await,
        };
        // The replica may have frozen while it took them: a turn it gets now is not to be
        // trusted until its leases are renewed, so a waiting sender is told to deliver again.
        let stalled = coordination.stalled();
        let mut tickets = tickets.into_iter();
        for mut job in batch.drain(..) {
            // One answer per job; a job left without one is refused like a failed call's.
            let ticket = tickets.next().unwrap_or_else(|| Some(Err(too_few())));
            let ticket = match ticket {
                Some(Ok(ticket)) if stalled && job.accepted.is_some() => {
                    coordination.withdraw(ticket).await;
                    let reason = "this replica's leases lapsed and are not renewed yet".to_owned();
                    Some(Err(Error::CoordinationUnavailable { reason, source: None }))
                }
                ticket => ticket,
            };
            job.answer(match &ticket {
                Some(Err(e)) => Err(e),
                _ => Ok(()),
            });
            job.ticket = ticket;
            if worker.send(job).is_err() {
                return;
            }
        }
    }
}
