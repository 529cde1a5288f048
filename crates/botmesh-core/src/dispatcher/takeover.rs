//! Taking over: the journaled messages of a chat that dead or stalled replicas left
//! unfinished, sorted around a turn's own message so they are handled in journal order, and
//! the hand-back of what this replica cannot finish to the chat's next holder.

use std::sync::Arc;

use botmesh_traits::{Inbound, InboxRecord, InboxState};

use super::job::Work;
use super::lock;
use super::worker::Worker;
use crate::BotError;
use crate::durable::{self, Claim};

/// What a turn takes over (see [`Worker::left_over`]), in journal order.
#[derive(Default)]
pub(super) struct LeftOver {
    /// Journaled before the turn's own message: handled first.
    pub(super) before: Vec<InboxRecord>,
    /// Journaled after it, with nothing queued elsewhere in between: handled right after.
    pub(super) after: Vec<InboxRecord>,
    /// Journaled after a message still queued on a live replica: released for a holder after
    /// that one.
    pub(super) rest: Vec<InboxRecord>,
    /// The turn's own message is no longer this replica's to handle: another holder took it
    /// over (it is acknowledged, or pending under that holder).
    pub(super) own_gone: bool,
}

/// Sorts the chat's pending journal `records` (in journal order) for a turn whose grant
/// passed over the incarnations `passed`: what the turn takes before its own message `own`,
/// after it, and what it leaves for a later holder. `me` is this replica's incarnation;
/// `own_taken_back` says it just claimed `own` back from [`durable::RELEASED`]; `complete`
/// that an own message missing from `records` is no longer this replica's (rather than past
/// the end of a listing that stopped short).
pub(super) fn sort_left_over(
    records: Vec<InboxRecord>,
    passed: &[String],
    own: Option<&str>,
    me: &str,
    own_taken_back: bool,
    complete: bool,
) -> LeftOver {
    let mut left = LeftOver::default();
    let listed = own.is_some_and(|own| records.iter().any(|r| r.id == own));
    // Missing and no longer ours: another holder handled it, or has it. Its place in the
    // journal is unknown, as a takeover's is.
    left.own_gone = own.is_some() && !listed && complete;
    let own = own.filter(|_| !left.own_gone);
    let (mut seen_own, mut blocked) = (false, false);
    for record in records {
        // A hand-back names its replica too; its own queued messages are still its own.
        let takeable = record.owner == durable::RELEASED
            || (record.owner != me && passed.contains(&record.owner));
        if Some(record.id.as_str()) == own {
            seen_own = true;
            // Taken over by another holder, which may be handling it right now: what comes
            // after it waits for that holder.
            left.own_gone = record.owner != me && !own_taken_back;
            blocked = left.own_gone;
        } else if !takeable {
            // Queued on a live replica (this one included) with its own ticket: what comes
            // after it in the journal waits for it. One journaled before the turn's own
            // message had its ticket before this turn's, and is done with it: handled and
            // being acknowledged, or being released. A turn with no place in the journal (a
            // takeover, or a message handled elsewhere meanwhile) cannot tell: any such
            // message may still come after it.
            blocked |= seen_own || own.is_none();
        } else if blocked {
            left.rest.push(record);
        } else if seen_own {
            left.after.push(record);
        } else {
            left.before.push(record);
        }
    }
    left
}

impl Worker {
    /// The chat's journaled messages left unfinished by the incarnations a grant passed over
    /// (dead ones, or any that released a message it could not finish), in journal order:
    /// those before the turn's own message `own`, and those after it. `None` when the journal
    /// could not be read.
    pub(super) async fn left_over(
        &mut self,
        passed: &[String],
        own: Option<&str>,
    ) -> Option<LeftOver> {
        /// The most messages taken over at once; the rest go to the periodic replay (or a
        /// later holder).
        const LIMIT: usize = 100;
        let shared = Arc::clone(self.shared());
        let records = match shared.store.inbox_pending_for(&self.key, LIMIT).await {
            Ok(records) => records,
            Err(e) => {
                self.report(e.into());
                return None;
            }
        };
        let listed = own.is_some_and(|own| records.iter().any(|r| r.id == own));
        // The own message's record: from the listing, or read on its own when the listing does
        // not show it (acknowledged meanwhile, or past the records the listing returned).
        let own_record = match own {
            Some(own) if listed => records.iter().find(|r| r.id == own).cloned(),
            Some(own) => match shared.store.inbox_get(own).await {
                Ok(record) => record.filter(|r| r.state == InboxState::Pending),
                Err(e) => {
                    self.report(e.into());
                    return None;
                }
            },
            None => None,
        };
        // Released while its job waited for the turn (this replica was passed over): the job
        // takes it back, unless another holder claimed it first.
        let mut own_taken_back = false;
        if let Some(record) = own_record.as_ref().filter(|r| r.owner == durable::RELEASED) {
            match shared.store.inbox_claim(&record.id, durable::RELEASED, &shared.owner).await {
                Ok(claimed) => own_taken_back = claimed,
                Err(e) => {
                    self.report(e.into());
                    return None;
                }
            }
        }
        // Pending and ours but not listed: the listing stopped short of it, so everything it
        // shows comes first. Otherwise what it shows is all there is.
        let ours = own_record.is_some_and(|r| r.owner == shared.owner || own_taken_back);
        let complete = listed || !ours;
        Some(sort_left_over(records, passed, own, &shared.owner, own_taken_back, complete))
    }

    /// Claims and handles `records` under the turn held now, acknowledging each. Returns
    /// `true` when the turn was lost on the way: what is left is released again for the next
    /// holder.
    pub(super) async fn take_over(
        &mut self,
        records: Vec<InboxRecord>,
        changed_hands: bool,
    ) -> bool {
        let shared = Arc::clone(self.shared());
        let mut changed_hands = changed_hands;
        let mut records = records.into_iter();
        while let Some(record) = records.next() {
            if self.turn.check().is_err() {
                // Lost: what is left is released for the next holder.
                self.release_record(&record.id, &record.owner).await;
                for record in records {
                    self.release_record(&record.id, &record.owner).await;
                }
                return true;
            }
            let inbound = match durable::claim(&shared, &record).await {
                Claim::Claimed(inbound) => inbound,
                Claim::Gone => continue,
                // Someone else has it, and may be handling it now: nothing after it in the
                // journal may go first. The rest is released for a later holder.
                Claim::Held => {
                    for record in records {
                        self.release_record(&record.id, &record.owner).await;
                    }
                    return true;
                }
            };
            self.turn.set_first_attempt(false);
            let outcome = self.bounded(Work::Message(inbound.clone()), changed_hands).await;
            changed_hands = false;
            let stalled = self.turn.check().is_err();
            if stalled || outcome.unfinished() {
                self.give_back(&inbound, &record.id, !stalled).await;
                for record in records {
                    self.release_record(&record.id, &record.owner).await;
                }
                return true;
            }
            durable::acknowledge(&shared, &self.key, &record.id).await;
        }
        false
    }

    /// Whether journaled message `id` is still pending and this replica's, taking it back if
    /// it was released meanwhile (an append this replica gave up on, found landed). A store
    /// error counts as yes: handling a message twice beats losing it.
    pub(super) async fn still_ours(&mut self, id: &str) -> bool {
        let shared = Arc::clone(self.shared());
        match shared.store.inbox_get(id).await {
            Ok(Some(r)) if r.state == InboxState::Pending && r.owner == durable::RELEASED => {
                match shared.store.inbox_claim(id, durable::RELEASED, &shared.owner).await {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.report(e.into());
                        true
                    }
                }
            }
            Ok(Some(r)) => r.state == InboxState::Pending && r.owner == shared.owner,
            Ok(None) => false,
            Err(e) => {
                self.report(e.into());
                true
            }
        }
    }

    /// Releases a journaled message this replica could not finish under a turn: the next
    /// holder of the chat takes it over before its own (its grant names this replica), or,
    /// if the chat stays quiet, the periodic replay does. While the store cannot be written,
    /// this is retried in the background.
    pub(super) async fn hand_back(&mut self, id: &str) {
        let owner = self.shared().owner.clone();
        self.release_record(id, &owner).await;
    }

    /// Gives back a journaled message this replica could not finish: handed back for the next
    /// holder, unless its handling `failed` on a backend or the transport for the
    /// `max_attempts`-th time here, which gives up on it (reported, acknowledged).
    pub(super) async fn give_back(&mut self, inbound: &Inbound, id: &str, failed: bool) {
        let max = self.shared().durability.as_ref().map_or(1, |d| d.max_attempts);
        let failures = if failed {
            let mut failures = lock(&self.disp.failures);
            let n = failures.entry(id.to_owned()).or_insert(0);
            *n += 1;
            *n
        } else {
            0
        };
        if failures < max {
            return self.hand_back(id).await;
        }
        lock(&self.disp.failures).remove(id);
        self.report(BotError::GaveUp {
            key: self.key.clone(),
            id: inbound.id.clone(),
            attempts: max,
        });
        let shared = Arc::clone(self.shared());
        durable::acknowledge(&shared, &self.key, id).await;
    }

    /// Releases journaled message `id`, owned by `from`, for the chat's next holder (see
    /// [`Worker::hand_back`]).
    pub(super) async fn release_record(&mut self, id: &str, from: &str) {
        let shared = Arc::clone(self.shared());
        durable::release(&shared, &self.key, id, from).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pending record `id` owned by `owner`.
    fn rec(id: &str, owner: &str) -> InboxRecord {
        InboxRecord::pending(id, "c", "{}", owner)
    }

    fn ids(records: &[InboxRecord]) -> Vec<&str> {
        records.iter().map(|r| r.id.as_str()).collect()
    }

    /// `(before, after, rest, own_gone)` for a journal of `records` sorted by replica `me`.
    fn sort(
        records: &[InboxRecord],
        own: Option<&str>,
        taken_back: bool,
        complete: bool,
    ) -> (Vec<String>, Vec<String>, Vec<String>, bool) {
        let passed = ["dead".to_owned()];
        let left = sort_left_over(records.to_vec(), &passed, own, "me", taken_back, complete);
        let owned = |r: &[InboxRecord]| ids(r).into_iter().map(str::to_owned).collect();
        (owned(&left.before), owned(&left.after), owned(&left.rest), left.own_gone)
    }

    const R: &str = durable::RELEASED;

    #[test]
    fn a_message_queued_elsewhere_before_the_own_one_is_done_and_blocks_nothing() {
        let journal = [rec("q", "live"), rec("r1", R), rec("own", "me"), rec("r2", "dead")];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert_eq!(
            (before, after, rest, gone),
            (vec!["r1".into()], vec!["r2".into()], vec![], false)
        );
    }

    #[test]
    fn what_follows_a_message_queued_elsewhere_after_the_own_one_waits() {
        let journal = [rec("own", "me"), rec("r1", R), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert_eq!(
            (before, after, rest, gone),
            (vec![], vec!["r1".into()], vec!["r2".into()], false)
        );
    }

    #[test]
    fn a_takeover_takes_nothing_past_a_message_still_queued_on_a_live_replica() {
        let journal = [rec("r1", R), rec("d", "dead"), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, None, false, true);
        assert_eq!(before, ["r1", "d"]);
        assert!(after.is_empty() && !gone);
        assert_eq!(rest, ["r2"]);
    }

    #[test]
    fn an_own_message_handled_elsewhere_meanwhile_is_gone_and_the_turn_sorts_as_a_takeover() {
        let journal = [rec("r1", R), rec("q", "live"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone, "acknowledged by another holder");
        assert_eq!((before, after, rest), (vec!["r1".into()], vec![], vec!["r2".into()]));
        // Past the listing's limit, the own message is further on: all of these come first.
        let (before, _, rest, gone) = sort(&journal, Some("own"), false, false);
        assert!(!gone);
        assert_eq!((before, rest), (vec!["r1".into(), "r2".into()], vec![]));
    }

    #[test]
    fn an_own_message_another_holder_claimed_is_gone_and_what_follows_it_waits() {
        let journal = [rec("r1", R), rec("own", "other"), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone);
        assert_eq!((before, after, rest), (vec!["r1".into()], vec![], vec!["r2".into()]));
    }

    #[test]
    fn a_hand_back_naming_this_replica_leaves_its_own_queued_messages_to_their_jobs() {
        // The grant after this replica's own hand-back names it: its messages still queued
        // here with their tickets are not taken over, and what follows them waits.
        let journal = [rec("r1", R), rec("mine", "me"), rec("r2", R)];
        let passed = ["me".to_owned()];
        let left = sort_left_over(journal.to_vec(), &passed, None, "me", false, true);
        assert_eq!(ids(&left.before), ["r1"]);
        assert!(left.after.is_empty());
        assert_eq!(ids(&left.rest), ["r2"]);
    }

    #[test]
    fn an_own_message_released_and_taken_back_is_handled_in_its_place() {
        let journal = [rec("r1", R), rec("own", R), rec("r2", R)];
        let (before, after, rest, gone) = sort(&journal, Some("own"), true, true);
        assert!(!gone);
        assert_eq!((before, after, rest), (vec!["r1".into()], vec!["r2".into()], vec![]));
        let (_, _, rest, gone) = sort(&journal, Some("own"), false, true);
        assert!(gone, "another holder claimed it first");
        assert_eq!(rest, ["r2"]);
    }
}
