//! The work of one turn: what the replicas a grant passed over left in the journal, sorted
//! around the job's own message so that the chat's messages are handled in journal order;
//! what this replica cannot finish, handed back to the chat's next holder; and the turn given
//! back at the end. The worker in `botmesh-core` runs the items; this decides which, in which
//! order, and what becomes of each message.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use botmesh_core::Event;
use botmesh_core::coordination::{
    Claim, Item, Journal, Outcome, Own, RELEASED, Recorded, Turn, TurnRun,
};
use botmesh_core::traits::{
    ChatKey, InboxRecord, InboxState, MessageId, ReleaseOptions, async_trait,
};
use tokio::time::Instant;

/// What a turn's run needs of the runtime that granted the turn.
#[async_trait]
pub(crate) trait Grants: Send + Sync + 'static {
    /// When this replica last gave its leases up because it stalled, if it ever did.
    fn given_up_at(&self) -> Option<Instant>;

    /// Gives a turn back.
    async fn release(&self, turn: &Arc<dyn Turn>, options: ReleaseOptions);
}

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
async fn left_over(
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

/// Begins the work of `turn`, just acquired for a job whose own work is `own` (see
/// `Coordination::begin`). Without the journal, or with nothing to read in it first (see
/// [`reads_first`]), the turn begins at once; otherwise see [`begin_journaled`] (boxed: the
/// common turn's future stays small).
pub(crate) fn begin<'a>(
    state: &'a Arc<dyn Grants>,
    turn: Arc<dyn Turn>,
    own: Own,
    sweep: Vec<String>,
    journal: Option<Arc<dyn Journal>>,
) -> Begin<'a> {
    match journal {
        Some(journal) if reads_first(state.as_ref(), turn.as_ref(), &own, &sweep) => {
            Begin::Reading(Box::pin(begin_journaled(state, turn, own, sweep, journal)))
        }
        journal => {
            Begin::Now(Some(Run::boxed(state, turn, own, journal, LeftOver::default(), false)))
        }
    }
}

/// Whether a turn with the journal has to read it before it begins: its message was
/// journaled before this replica last stalled (was it taken over meanwhile?), it sweeps or
/// takes over, or its grant passed other incarnations over. Most turns have nothing to read.
fn reads_first(state: &dyn Grants, turn: &dyn Turn, own: &Own, sweep: &[String]) -> bool {
    matches!(own, Own::Journaled(recorded) if stalled_since(state, recorded))
        || !sweep.is_empty()
        || matches!(own, Own::Nothing)
        || !turn.passed_over().is_empty()
}

/// Whether this replica stalled (and gave its leases up) since `recorded` was journaled.
fn stalled_since(state: &dyn Grants, recorded: &Recorded) -> bool {
    state.given_up_at().is_some_and(|at| at > recorded.since)
}

/// What beginning a turn comes to: its run, or `None` when the turn went back unused.
pub(crate) type Started = Option<Box<dyn TurnRun>>;

/// How a turn begins: at once, or once the journal was read. Not a future itself, so that
/// the caller's future holds no room for the journal's reads (and no second copy of the
/// job's message) on the common path.
pub(crate) enum Begin<'a> {
    /// The run, or `None` when the turn went back unused.
    Now(Started),
    /// The journal's reads, boxed.
    Reading(Pin<Box<dyn Future<Output = Started> + Send + 'a>>),
}

/// [`begin`] with the journal: first what the incarnations the grant passed over (or the
/// sweep) left unfinished.
async fn begin_journaled(
    state: &Arc<dyn Grants>,
    turn: Arc<dyn Turn>,
    own: Own,
    sweep: Vec<String>,
    journal: Arc<dyn Journal>,
) -> Started {
    let key = turn.key().clone();
    if let Own::Journaled(recorded) = &own
        && taken_while_stalled(state.as_ref(), journal.as_ref(), &key, recorded).await
    {
        // The replica that took the chat over meanwhile took this message too: the turn goes
        // back unused, with what its grant passed over passed on, unread.
        let options = if turn.passed_over().is_empty() {
            ReleaseOptions::unused()
        } else {
            ReleaseOptions::unused().handing_back()
        };
        state.release(&turn, options).await;
        return None;
    }
    let sweeping = !sweep.is_empty() || matches!(own, Own::Nothing);
    let mut passed = turn.passed_over().to_vec();
    passed.extend(sweep);
    let left = if sweeping || !passed.is_empty() {
        let own_id = match &own {
            Own::Journaled(recorded) => Some(recorded.id.as_str()),
            _ => None,
        };
        left_over(journal.as_ref(), &key, &passed, own_id).await
    } else {
        Some(LeftOver::default())
    };
    // Unread (the store failed), what comes first is unknown: everything is handed on.
    let unread = left.is_none();
    let left = left.unwrap_or_default();
    let mut own = own;
    if left.own_gone
        && let Own::Journaled(recorded) = &own
    {
        // Another holder took this message over while it waited here for its turn.
        let id = recorded.message.clone();
        journal.emit(Event::Duplicate { key: key.clone(), id });
        own = Own::Nothing;
    }
    for record in &left.rest {
        journal.release(&key, &record.id, &record.owner).await;
    }
    Some(Run::boxed(state, turn, own, Some(journal), left, unread))
}

/// Whether this replica stalled since `recorded` was journaled and the replica that took the
/// chat over took the message too.
async fn taken_while_stalled(
    state: &dyn Grants,
    journal: &dyn Journal,
    key: &ChatKey,
    recorded: &Recorded,
) -> bool {
    stalled_since(state, recorded) && !journal.still_ours(key, &recorded.id).await
}

/// Where a turn's run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Taking over what was journaled before the job's own message.
    Before,
    /// The job's own work.
    Own,
    /// Taking over what was journaled right after it.
    After,
    /// Nothing left to run.
    Finished,
}

/// What the item handed out last was.
enum Pending {
    TakenOver { record: InboxRecord, message: MessageId },
    Own,
}

/// A turn's run under coordination.
struct Run {
    state: Arc<dyn Grants>,
    turn: Arc<dyn Turn>,
    key: ChatKey,
    journal: Option<Arc<dyn Journal>>,
    own: Own,
    phase: Phase,
    /// The records being taken over now (before the own message, then after it).
    list: VecDeque<InboxRecord>,
    /// The records to take over after the own message.
    after: Vec<InboxRecord>,
    pending: Option<Pending>,
    /// The next item handed out is the first of a turn that changed hands.
    changed_hands: bool,
    /// Something happened under the turn.
    used: bool,
    /// The turn was lost (or the journal unreadable): what is left goes to the next holder.
    lost: bool,
    /// Lost rather than failed: the message is not to blame, no attempt is counted.
    interrupted: bool,
    /// Records were released for a holder after a message queued elsewhere.
    rest_left: bool,
    /// The job's message, to acknowledge with the release.
    ack: Option<String>,
}

impl Run {
    /// The run of `turn`, boxed, taking over `left` (whose `rest` was released already)
    /// around the job's own work; `lost` when the journal could not be read.
    fn boxed(
        state: &Arc<dyn Grants>,
        turn: Arc<dyn Turn>,
        own: Own,
        journal: Option<Arc<dyn Journal>>,
        left: LeftOver,
        lost: bool,
    ) -> Box<dyn TurnRun> {
        let LeftOver { before, after, rest, .. } = left;
        Box::new(Self {
            state: Arc::clone(state),
            key: turn.key().clone(),
            changed_hands: turn.changed_hands(),
            used: !before.is_empty(),
            list: before.into(),
            after,
            turn,
            journal,
            own,
            phase: Phase::Before,
            pending: None,
            lost,
            interrupted: false,
            rest_left: !rest.is_empty(),
            ack: None,
        })
    }

    /// Releases what is left of the records being taken over.
    async fn release_list(&mut self) {
        let Some(journal) = &self.journal else { return };
        for record in self.list.drain(..) {
            journal.release(&self.key, &record.id, &record.owner).await;
        }
    }

    /// The next record being taken over, claimed; `None` once there is none (or the turn was
    /// lost on the way, or a record is held elsewhere: the rest is released).
    async fn take_next(&mut self) -> Option<Item> {
        let journal = Arc::clone(self.journal.as_ref()?);
        while let Some(record) = self.list.pop_front() {
            if self.turn.check().is_err() {
                // Lost: what is left is released for the next holder.
                journal.release(&self.key, &record.id, &record.owner).await;
                self.release_list().await;
                self.lost = true;
                return None;
            }
            match journal.claim(&record).await {
                Claim::Claimed(taken) => {
                    let changed_hands = std::mem::take(&mut self.changed_hands);
                    let message = taken.inbound.id.clone();
                    self.pending = Some(Pending::TakenOver { record, message });
                    return Some(Item::TakenOver { taken, changed_hands });
                }
                Claim::Gone => {}
                // Someone else has it, and may be handling it now: nothing after it in the
                // journal may go first. The rest is released for a later holder.
                Claim::Held => {
                    self.release_list().await;
                    self.lost = true;
                    return None;
                }
            }
        }
        None
    }

    /// After the job's own work (run with `outcome`, or skipped): its message acknowledged
    /// with the release, or handed back; then what was journaled after it, unless the turn
    /// was lost.
    async fn after_own(&mut self, outcome: Outcome, entered_lost: bool) {
        if !entered_lost {
            // Lost mid-way (this replica stalled past its lease), failed on a backend, or cut
            // with an answer no checkpoint holds: what it did may not have reached anyone, or
            // may not be stored. The next holder takes it over, before anything later.
            self.interrupted = self.turn.check().is_err();
            let journaled = matches!(self.own, Own::Journaled(_));
            self.lost = self.interrupted || (outcome.unfinished() && journaled);
        }
        let own = std::mem::replace(&mut self.own, Own::Nothing);
        if let (Own::Journaled(recorded), Some(journal)) = (own, &self.journal) {
            if self.lost {
                let failed = !self.interrupted;
                journal.give_back(&self.key, &recorded.message, &recorded.id, failed).await;
            } else {
                self.ack = Some(recorded.id);
            }
        }
        let after = std::mem::take(&mut self.after);
        if after.is_empty() {
            self.phase = Phase::Finished;
            return;
        }
        self.list = after.into();
        if self.lost {
            self.release_list().await;
            self.phase = Phase::Finished;
            return;
        }
        // The own message first: it comes before these in the journal.
        if let (Some(id), Some(journal)) = (self.ack.take(), &self.journal) {
            journal.acknowledge(&self.key, &id).await;
        }
        self.changed_hands = false;
        self.used = true;
        self.phase = Phase::After;
    }
}

#[async_trait]
impl TurnRun for Run {
    async fn next(&mut self) -> Option<Item> {
        loop {
            match self.phase {
                Phase::Before => {
                    if !self.lost
                        && let Some(item) = self.take_next().await
                    {
                        return Some(item);
                    }
                    self.phase = Phase::Own;
                }
                Phase::Own => {
                    let entered_lost = self.lost;
                    self.interrupted = entered_lost;
                    if !entered_lost && !matches!(self.own, Own::Nothing) {
                        self.pending = Some(Pending::Own);
                        let changed_hands = self.changed_hands && !self.used;
                        self.changed_hands = false;
                        return Some(Item::Own { changed_hands });
                    }
                    self.after_own(Outcome::default(), entered_lost).await;
                }
                Phase::After => {
                    if let Some(item) = self.take_next().await {
                        return Some(item);
                    }
                    self.phase = Phase::Finished;
                }
                Phase::Finished => return None,
            }
        }
    }

    async fn done(&mut self, outcome: Outcome) {
        match self.pending.take() {
            Some(Pending::TakenOver { record, message }) => {
                let Some(journal) = self.journal.clone() else { return };
                let stalled = self.turn.check().is_err();
                if stalled || outcome.unfinished() {
                    journal.give_back(&self.key, &message, &record.id, !stalled).await;
                    // Nothing more is taken over under this turn.
                    self.release_list().await;
                    self.lost = true;
                    if self.phase == Phase::After {
                        self.phase = Phase::Finished;
                    }
                } else {
                    journal.acknowledge(&self.key, &record.id).await;
                }
            }
            Some(Pending::Own) => {
                self.used |= outcome.used;
                self.after_own(outcome, false).await;
            }
            None => {}
        }
    }

    async fn finish(&mut self, retain: Option<Duration>) {
        let ack = self.ack.take();
        let acknowledged = async {
            if let (Some(id), Some(journal)) = (ack, &self.journal) {
                journal.acknowledge(&self.key, &id).await;
            }
        };
        let options = if self.used { ReleaseOptions::used() } else { ReleaseOptions::unused() };
        let handing_back = self.lost || self.rest_left;
        let options = if handing_back { options.handing_back() } else { options };
        let released = self.state.release(&self.turn, options.retain(retain));
        // The next holder may start while the acknowledgement is on the wire.
        tokio::join!(acknowledged, released);
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
