//! What a chat's queue carries: a job (a message, a conversation timer, or a takeover of what
//! other replicas left unfinished), with its ticket and where its message stands with the
//! inbox journal, and the answer owed to a sender waiting to acknowledge it.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Error, Inbound, Ticket};
use tokio::time::Instant;
use tracing::Span;

use super::Accepted;
use super::dedupe::Waiter;
use crate::Result;
use crate::coordination::{Coordination, Turn};

/// Something a chat's worker does under the chat's turn.
#[allow(
    clippy::large_enum_variant,
    reason = "messages are nearly every job; boxing them would allocate once more per message"
)]
pub(super) enum Work {
    Message(Inbound),
    /// A conversation timer came due: `serial` names the conversation, `park` the wait.
    Timer {
        serial: u64,
        park: u64,
        timer: Timer,
    },
    /// Take over, under the chat's turn and in journal order, the chat's journaled messages
    /// that these incarnations (dead ones) or any replica (released ones) left unfinished.
    TakeOver {
        passed: Vec<String>,
    },
}

/// Where a message stands with the inbox journal.
pub(super) enum Journal {
    /// Durability is off (or this is a timer).
    Off,
    /// To be journaled before it takes a ticket.
    Pending,
    /// In the journal under `id`, this replica's since `since`. `first` when this job journaled
    /// it: no earlier run can have acted on it.
    Recorded { id: String, since: Instant, first: bool },
    /// Already in the journal: a retry of a message this or another replica has.
    Duplicate,
    /// Refused to a sender waiting in [`Dispatcher::accept`] (the journal or the ticket could
    /// not be written): the sender delivers it again, so it is not handled here.
    Refused,
    /// Pending in the journal under a live replica that may be handling it now: a sender
    /// waiting in [`Dispatcher::accept`] is told to deliver it again later, when it is either
    /// done (a duplicate then) or released to whoever receives it.
    Elsewhere,
}

/// A unit of work with, under coordination, the ticket taken for it on arrival.
pub(super) struct Job {
    pub(super) work: Work,
    pub(super) ticket: Option<Result<Ticket, Error>>,
    pub(super) journal: Journal,
    /// A sender waiting to acknowledge the message (see [`Dispatcher::accept`]).
    pub(super) accepted: Option<Waiter>,
    /// The message's span, from its arrival to its acknowledgement (none for other work).
    pub(super) span: Span,
}

impl Job {
    pub(super) fn timer(serial: u64, park: u64, timer: Timer) -> Self {
        Self {
            work: Work::Timer { serial, park, timer },
            ticket: None,
            journal: Journal::Off,
            accepted: None,
            span: Span::none(),
        }
    }

    /// Answers the waiting sender, if any, once the message is journaled (with durability)
    /// and, under coordination, `ticketed` says whether its ticket was taken. A message the
    /// sender must deliver again is marked [`Journal::Refused`].
    pub(super) fn answer(&mut self, ticketed: Result<(), &Error>) {
        let Some(tx) = self.accepted.take() else { return };
        let answer = match (&self.journal, ticketed) {
            (Journal::Duplicate, _) => Ok(Accepted::Duplicate),
            (Journal::Elsewhere, _) => Err(Error::CoordinationUnavailable {
                reason: "the message is being handled by another replica".to_owned(),
                source: None,
            }
            .into()),
            (Journal::Refused, _) => Err(Error::Store {
                op: "inbox_append",
                source: "the inbox journal could not be written".into(),
            }
            .into()),
            (Journal::Recorded { .. } | Journal::Pending | Journal::Off, Ok(())) => {
                Ok(Accepted::Queued)
            }
            // Journaled but without its place in the chat's queue: the message is released
            // for whoever holds the chat next, and the sender, told to deliver it again, waits
            // for that before it sends anything later (the delivery takes the message over).
            (Journal::Recorded { .. } | Journal::Pending, Err(e)) => {
                Err(Error::CoordinationUnavailable { reason: e.to_string(), source: None }.into())
            }
            (Journal::Off, Err(e)) => {
                self.journal = Journal::Refused;
                Err(Error::CoordinationUnavailable { reason: e.to_string(), source: None }.into())
            }
        };
        tx.send(answer);
    }
}

/// A chat's turn held under coordination, with the coordination that granted it.
pub(super) type Held = (Arc<dyn Coordination>, Arc<dyn Turn>);

#[derive(Debug, Clone, Copy)]
pub(super) enum Timer {
    Timeout,
    Idle(Duration),
}

/// How long a conversation timer that could not get its turn waits before trying again.
pub(super) const TIMER_RETRY: Duration = Duration::from_secs(1);
