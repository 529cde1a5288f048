//! A coordinator that writes the bot's inbox journal in its own calls: a message's journal
//! record goes to the backend with its ticket, and its acknowledgement with the turn's release.

use std::time::Duration;

use async_trait::async_trait;

use crate::{ChatKey, InboxRecord, InboxState, ReleaseOptions, Result, Ticket, TurnGrant};

/// What [`TurnJournal::take_tickets_journaling`] did with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournaledTicket {
    /// Journaled now, with its ticket.
    Appended(Ticket),
    /// A record with its id was journaled already, in state `state`; no ticket was taken.
    Duplicate {
        /// The journaled record's state.
        state: InboxState,
    },
}

/// Found through [`Coordinator::turn_journal`](crate::Coordinator::turn_journal): a
/// coordinator that keeps its tickets and turns on the same backend as the store's inbox
/// journal, and writes both in one call.
///
/// Without it, a journaled message costs the bot two calls more than a plain one: its append
/// before its ticket, and its acknowledgement beside the turn's release. With it, the bot
/// journals a chat's messages with their tickets, and acknowledges each with the release of
/// its turn, when [`place`](TurnJournal::place) names its store's journal
/// ([`JournalStore::place`](crate::JournalStore::place)).
///
/// Both calls are atomic: what they write lands together or not at all.
#[async_trait]
pub trait TurnJournal: Send + Sync {
    /// The journal this coordinator writes, named as [`JournalStore::place`](crate::JournalStore::place)
    /// names it.
    fn place(&self) -> &str;

    /// Journals `records` (all of chat `key`, owned by this coordinator's incarnation) in
    /// order, each unless its id is journaled already, remembered for dedupe `retain` after
    /// its acknowledgement; takes a ticket in `key`'s queue for each record journaled now, in
    /// the same order, as [`Coordinator::take_tickets`](crate::Coordinator::take_tickets) would.
    ///
    /// It stops at the first record found pending already (a retry of a message the bot may
    /// take over): the answer ends with that record's, and the records after it are left
    /// untouched, for the caller to journal once it has decided about that one. So the answer
    /// holds one item per record up to the first pending duplicate, or one per record.
    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>>;

    /// Gives `grant`'s turn back as
    /// [`Coordinator::release_turn_with`](crate::Coordinator::release_turn_with) does, and
    /// acknowledges journaled message `id` in the same call: handled. `Some(false)` when the
    /// turn was no longer ours (the acknowledgement is written all the same).
    ///
    /// `None` when it did neither, because giving this turn back needs no call of its own (a
    /// coordinator that passes a turn to its own next ticket locally): the caller then
    /// acknowledges through the store and releases as usual. After an error either may have
    /// been written; both are safe to do again.
    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> Result<Option<bool>>;
}
