//! The work of one turn: what the replicas a grant passed over left in the journal (read and
//! sorted around the job's own message in `left_over.rs`), run in the chat's journal order;
//! what this replica cannot finish, handed back to the chat's next holder; and the turn given
//! back at the end. The worker in `botmesh-core` runs the items; this decides which, in which
//! order, and what becomes of each message.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use botmesh_core::Event;
use botmesh_core::coordination::{Claim, Item, Journal, Outcome, Own, Recorded, Turn, TurnRun};
use botmesh_core::traits::{ChatKey, InboxRecord, MessageId, ReleaseOptions, async_trait};
use tokio::time::Instant;

use crate::left_over::{LeftOver, left_over};

/// What a turn's run needs of the runtime that granted the turn.
#[async_trait]
pub(crate) trait Grants: Send + Sync + 'static {
    /// When this replica last gave its leases up because it stalled, if it ever did.
    fn given_up_at(&self) -> Option<Instant>;

    /// Gives a turn back.
    async fn release(&self, turn: &Arc<dyn Turn>, options: ReleaseOptions);

    /// Gives a turn back and acknowledges journaled message `id` in one backend call: `true`
    /// when done; `false` when not (the backend cannot, or the call failed), the turn still
    /// held.
    async fn release_acknowledging(
        &self,
        turn: &Arc<dyn Turn>,
        options: ReleaseOptions,
        id: &str,
    ) -> bool;
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
                let failed = !self.interrupted && outcome.counts_as_attempt();
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
            journal.acknowledge(&self.key, id).await;
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
                    let failed = !stalled && outcome.counts_as_attempt();
                    journal.give_back(&self.key, &message, &record.id, failed).await;
                    // Nothing more is taken over under this turn.
                    self.release_list().await;
                    self.lost = true;
                    if self.phase == Phase::After {
                        self.phase = Phase::Finished;
                    }
                } else {
                    journal.acknowledge(&self.key, record.id).await;
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
        let options = if self.used { ReleaseOptions::used() } else { ReleaseOptions::unused() };
        let handing_back = self.lost || self.rest_left;
        let options = if handing_back { options.handing_back() } else { options };
        let options = options.retain(retain);
        if let (Some(id), Some(journal)) = (&ack, &self.journal)
            && journal.rides_releases()
            && self.state.release_acknowledging(&self.turn, options, id).await
        {
            journal.acknowledged(id);
            return;
        }
        let acknowledged = async {
            if let (Some(id), Some(journal)) = (ack, &self.journal) {
                journal.acknowledge(&self.key, id).await;
            }
        };
        let released = self.state.release(&self.turn, options);
        // The next holder may start while the acknowledgement is on the wire.
        tokio::join!(acknowledged, released);
    }
}
