//! What a turn takes over: the chat's journaled messages the incarnations its grant passed
//! over left unfinished, read from the journal and sorted around the turn's own message, so
//! that the chat's messages are handled in journal order.

use botmesh_core::coordination::{Journal, RELEASED};
use botmesh_core::traits::{ChatKey, InboxRecord, InboxState};

/// What a turn takes over (see [`left_over`]), in journal order.
#[derive(Debug, Default)]
pub(crate) struct LeftOver {
    /// Journaled before the turn's own message: handled first.
    pub(crate) before: Vec<InboxRecord>,
    /// Journaled after it, with nothing queued elsewhere in between: handled right after.
    pub(crate) after: Vec<InboxRecord>,
    /// Journaled after a message still queued on a live replica: released for a holder after
    /// that one.
    pub(crate) rest: Vec<InboxRecord>,
    /// The turn's own message is no longer this replica's to handle: another holder took it
    /// over (it is acknowledged, or pending under that holder).
    pub(crate) own_gone: bool,
}

/// Sorts the chat's pending journal `records` (in journal order) for a turn whose grant
/// passed over the incarnations `passed`: what the turn takes before its own message `own`,
/// after it, and what it leaves for a later holder. `me` is this replica's incarnation;
/// `own_taken_back` says it just claimed `own` back from [`RELEASED`]; `complete` that an own
/// message missing from `records` is no longer this replica's (rather than past the end of a
/// listing that stopped short).
pub(crate) fn sort_left_over(
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
        let takeable =
            record.owner == RELEASED || (record.owner != me && passed.contains(&record.owner));
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

/// The chat's journaled messages left unfinished by the incarnations a grant passed over
/// (dead ones, or any that released a message it could not finish), sorted around the turn's
/// own message `own`. `None` when the journal could not be read (reported).
pub(crate) async fn left_over(
    journal: &dyn Journal,
    key: &ChatKey,
    passed: &[String],
    own: Option<&str>,
) -> Option<LeftOver> {
    /// The most messages taken over at once; the rest go to the periodic replay (or a later
    /// holder).
    const LIMIT: usize = 100;
    let records = match journal.pending_for(key, LIMIT).await {
        Ok(records) => records,
        Err(e) => {
            journal.report(key, e.into());
            return None;
        }
    };
    let listed = own.is_some_and(|own| records.iter().any(|r| r.id == own));
    // The own message's record: from the listing, or read on its own when the listing does
    // not show it (acknowledged meanwhile, or past the records the listing returned).
    let own_record = match own {
        Some(own) if listed => records.iter().find(|r| r.id == own).cloned(),
        Some(own) => match journal.get(own).await {
            Ok(record) => record.filter(|r| r.state == InboxState::Pending),
            Err(e) => {
                journal.report(key, e.into());
                return None;
            }
        },
        None => None,
    };
    // Released while its job waited for the turn (this replica was passed over): the job
    // takes it back, unless another holder claimed it first.
    let mut own_taken_back = false;
    if let Some(record) = own_record.as_ref().filter(|r| r.owner == RELEASED) {
        match journal.take_back(&record.id).await {
            Ok(claimed) => own_taken_back = claimed,
            Err(e) => {
                journal.report(key, e.into());
                return None;
            }
        }
    }
    // Pending and ours but not listed: the listing stopped short of it, so everything it
    // shows comes first. Otherwise what it shows is all there is.
    let me = journal.owner().to_owned();
    let ours = own_record.is_some_and(|r| r.owner == me || own_taken_back);
    let complete = listed || !ours;
    Some(sort_left_over(records, passed, own, &me, own_taken_back, complete))
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

    const R: &str = RELEASED;

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
