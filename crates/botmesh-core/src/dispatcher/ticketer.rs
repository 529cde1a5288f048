//! The ticketer: under coordination, the task in front of a chat's worker that journals each
//! message (with durability) and takes the chat's tickets in arrival order, while the worker
//! is still busy with earlier messages, then answers a waiting sender.

use std::sync::Arc;

use botmesh_traits::{ChatKey, Error};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::job::{Job, Journal, Work};
use crate::coordination::Coordination;
use crate::durable::{self, Journaled};
use crate::shared::Shared;

/// Journals the messages among `jobs` (all of chat `key`) that wait for it (in one concurrent
/// batch), marking retries of journaled messages as duplicates.
pub(super) async fn journal_jobs(shared: &Arc<Shared>, key: &ChatKey, jobs: &mut [Job]) {
    let inbound = jobs.iter().filter(|j| matches!(j.journal, Journal::Pending)).filter_map(|j| {
        match &j.work {
            Work::Message(m) => Some((m, &j.span)),
            Work::Timer { .. } | Work::TakeOver { .. } => None,
        }
    });
    let mut results = durable::journal(shared, key, inbound).await.into_iter();
    for job in jobs.iter_mut().filter(|j| matches!(j.journal, Journal::Pending)) {
        job.journal = match results.next() {
            Some(Journaled::New(id)) => {
                Journal::Recorded { id, since: Instant::now(), first: true }
            }
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
}

/// Journals (with durability) and takes the chat's tickets in arrival order, and passes each
/// job on to the worker. Jobs that arrived together get their tickets in one call; a retry of a
/// journaled message takes none.
pub(super) async fn ticketer(
    shared: Arc<Shared>,
    coordination: Arc<dyn Coordination>,
    key: ChatKey,
    mut rx: mpsc::UnboundedReceiver<Job>,
    worker: mpsc::UnboundedSender<Job>,
) {
    /// The most tickets taken in one call.
    const BATCH: usize = 64;
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        journal_jobs(&shared, &key, &mut batch).await;
        let takes = |j: &Job| {
            !matches!(j.journal, Journal::Duplicate | Journal::Refused | Journal::Elsewhere)
        };
        let wanted = batch.iter().filter(|j| takes(j)).count();
        let taken = match wanted {
            0 => Ok(Vec::new()),
            n => {
                // One call for the batch: a child of its first message's span, following
                // from the others'.
                let mut spans = batch.iter().filter(|j| takes(j)).map(|j| &j.span);
                let first = spans.next().cloned().unwrap_or_else(Span::none);
                let span =
                    tracing::debug_span!(target: "botmesh", parent: &first, "ticket", count = n);
                for other in spans {
                    span.follows_from(other);
                }
                coordination.take_tickets(&key, n).instrument(span).await
            }
        };
        let (mut tickets, failure) = match taken {
            Ok(tickets) if tickets.len() == wanted => (tickets.into_iter(), String::new()),
            Ok(_) => (Vec::new().into_iter(), "the backend returned too few tickets".to_owned()),
            Err(e) => (Vec::new().into_iter(), e.to_string()),
        };
        // The replica may have frozen while it took them: a turn it gets now is not to be
        // trusted until its leases are renewed, so a waiting sender is told to deliver again.
        let stalled = coordination.stalled();
        for mut job in batch.drain(..) {
            // Each job of a failed call is reported on its own, with the call's error.
            let ticket = takes(&job).then(|| {
                tickets.next().ok_or_else(|| Error::CoordinationUnavailable {
                    reason: failure.clone(),
                    source: None,
                })
            });
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
            if worker.send(Job { ticket, ..job }).is_err() {
                return;
            }
        }
    }
}
