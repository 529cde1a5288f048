//! The checker: what the recorded history of a run says about the promises.
//!
//! It reads three accounts of the same run, each written by a different party: the load
//! generator's (which message each replica acknowledged, and when), the fake platform's (every
//! send it received), and the replicas' own history files (what each handler took, under which
//! fence, and every checkpoint write that landed). All timestamps are on one monotonic clock.
//!
//! Faults outside the guarantees (Redis restarted empty: every lease, fence and journal entry
//! gone) are not hidden: what they break is counted apart, in [`Outside`]. So are the effects a
//! replica let go before it froze and that landed once it resumed: the fence is a local check
//! right before a send (or an acknowledgement), and what a process handed its HTTP stack just
//! before a `SIGSTOP` leaves it when the process runs again. The replicas write down when they
//! let each go (`Record::Sending`, `Record::Accepted`, and the ticket call that decided a
//! delivery, `Record::Ticketed`), so only those count as such.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::record::Record;

mod in_flight;

use in_flight::{IN_FLIGHT, LetGo};

/// A message the load generator got a `200 OK` for.
#[derive(Debug, Clone, Serialize)]
pub struct Acked {
    /// The chat number.
    pub chat: u32,
    /// The message number.
    pub seq: u32,
    /// The replica that acknowledged it.
    pub replica: String,
    /// When the acknowledgement came back.
    pub t: u64,
}

/// A send the fake platform received.
#[derive(Debug, Clone, Serialize)]
pub struct Sent {
    /// The chat number.
    pub chat: u32,
    /// The message it answers.
    pub seq: u32,
    /// What kind of reply it is.
    pub kind: String,
    /// The fence of the turn it was sent under.
    pub fence: u64,
    /// The replica that sent it.
    pub replica: String,
    /// When the platform received it.
    pub t: u64,
    /// The idempotency key it carried, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The kinds of fault the harness injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL a replica, then start it again under the same replica id.
    Kill,
    /// SIGSTOP a replica past its lease, then SIGCONT.
    Stop,
    /// `CLIENT KILL` every client connection of the replicas.
    ClientKill,
    /// Freeze Redis for a while (SIGSTOP, then SIGCONT).
    Pause,
    /// Restart Redis empty: outside the guarantees.
    Restart,
}

impl FaultKind {
    /// Every kind, in the order the harness cycles through them.
    pub const ALL: [Self; 5] =
        [Self::Kill, Self::Stop, Self::ClientKill, Self::Pause, Self::Restart];

    /// The kind's name on the command line and in the report.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
            Self::ClientKill => "client-kill",
            Self::Pause => "pause",
            Self::Restart => "restart",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A fault as it was injected.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// What was done.
    pub kind: FaultKind,
    /// The replica it hit, for kill and stop.
    pub replica: Option<String>,
    /// When it began, in ms since the run started.
    pub at_ms: u64,
    /// How long it lasted (until the restart, the SIGCONT), in ms.
    pub lasted_ms: u64,
    /// When it began, on the monotonic clock.
    #[serde(skip)]
    pub t: u64,
    /// When it ended, on the monotonic clock.
    #[serde(skip)]
    pub t_end: u64,
}

/// Everything the checker reads.
#[derive(Debug, Default)]
pub struct Run {
    /// What the load generator sent: every message number of every chat it got an
    /// acknowledgement for.
    pub acked: Vec<Acked>,
    /// What the platform received.
    pub sent: Vec<Sent>,
    /// Every replica's history.
    pub history: Vec<Record>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// The lease the replicas ran with, in ms.
    pub lease_ms: u64,
    /// Whether durability was on.
    pub durability: bool,
    /// When the run started, on the monotonic clock.
    pub t0: u64,
}

/// What a fault outside the guarantees broke.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Outside {
    /// Messages lost across a restart of Redis with no data.
    pub lost: u64,
    /// Overlapping turns next to such a restart (fences start again from nothing).
    pub overlaps: u64,
    /// Messages handled out of order next to such a restart.
    pub order_violations: u64,
    /// Replies delivered twice next to such a restart.
    pub duplicate_sends: u64,
    /// Checkpoint writes from a superseded holder next to such a restart.
    pub stale_writes: u64,
    /// Sends that passed their turn's check before their replica was stopped and reached the
    /// platform after the stop began. The overlaps and order violations they alone make are
    /// counted in `overlaps` and `order_violations` above.
    pub sends_across_stops: u64,
}

/// A lost message the spec allows without durability: it waited on a replica that died (or
/// froze past its lease), or Redis failed while it waited for its turn or was handled.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Accounted {
    /// The chat number.
    pub chat: u32,
    /// The message number.
    pub seq: u32,
    /// The replica that acknowledged it.
    pub replica: String,
    /// What happened to that replica after it acknowledged the message.
    pub fault: FaultKind,
    /// How long after the acknowledgement the fault began (0 when the message arrived while
    /// it lasted).
    pub waited_ms: u64,
}

/// The checker's findings.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    /// Turns of one chat under different fences whose effects overlapped in time.
    pub overlaps: u64,
    /// Messages whose first reply came before the first reply of an earlier message of their
    /// chat.
    pub order_violations: u64,
    /// Acknowledged messages that never got a reply, and that the spec does not allow to lose.
    pub lost: u64,
    /// Lost messages the spec allows (durability off: waiting on a replica that died, or on
    /// Redis while it failed).
    pub lost_allowed: u64,
    /// Messages taken by a handler more than once (at-least-once after a crash).
    pub duplicate_handled: u64,
    /// Replies delivered more than once.
    pub duplicate_sends: u64,
    /// Checkpoint writes that landed from a holder superseded before it issued them.
    pub stale_writes: u64,
    /// Messages acknowledged to the load generator.
    pub messages_sent: u64,
    /// Distinct messages some handler took.
    pub messages_handled: u64,
    /// Distinct messages that got a reply.
    pub messages_replied: u64,
    /// The longest time from a replica's kill to the first reply on every chat it left waiting.
    pub takeover_max_ms: u64,
    /// Each kill's takeover time, in ms.
    pub takeovers_ms: Vec<u64>,
    /// The lease, in ms.
    pub lease_ms: u64,
    /// Whether durability was on.
    pub durability: bool,
    /// What faults outside the guarantees broke.
    pub outside_guarantees: Outside,
    /// The lost messages the spec allows, each with the fault that explains it.
    pub accounted: Vec<Accounted>,
    /// The lost messages it does not allow (up to 50).
    pub lost_examples: Vec<(u32, u32)>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// Deliveries the load generator had to make again (a replica refused or was down).
    pub deliveries_refused: u64,
    /// Sends repeated under an idempotency key that the platform delivered once (a step run
    /// again after a crash between its send and the outbox's mark).
    pub sends_deduplicated: u64,
}

impl Report {
    /// Violations inside the guarantees: what fails a run.
    /// Sends delivered twice count only with durability: without it the spec does not
    /// deduplicate them (a step run again asks again).
    pub fn violations(&self) -> u64 {
        let duplicates = if self.durability { self.duplicate_sends } else { 0 };
        self.overlaps + self.order_violations + self.lost + duplicates + self.stale_writes
    }
}

/// One effect or start of a turn, for the overlap and stale-write checks.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u64,
    last_effect: Option<u64>,
    /// The last effect that was not in flight across a stop of its replica.
    last_inside: Option<u64>,
}

/// When each chat's messages were first answered, to tell whether a message was overtaken.
struct Overtaken {
    /// Per chat, (message number, first reply) by message number, with the earliest reply
    /// among that message and every later one.
    by_chat: BTreeMap<u32, Vec<(u32, u64)>>,
}

impl Overtaken {
    /// From each chat's first replies, sorted by message number.
    fn new(replies_by_chat: &BTreeMap<u32, Vec<(u32, u64)>>) -> Self {
        let mut by_chat = replies_by_chat.clone();
        for replies in by_chat.values_mut() {
            let mut earliest = u64::MAX;
            for reply in replies.iter_mut().rev() {
                earliest = earliest.min(reply.1);
                reply.1 = earliest;
            }
        }
        Self { by_chat }
    }

    /// The first time a message of `chat` after `seq` was answered.
    fn first_after(&self, chat: u32, seq: u32) -> Option<u64> {
        let replies = self.by_chat.get(&chat)?;
        let i = replies.partition_point(|&(s, _)| s <= seq);
        replies.get(i).map(|&(_, t)| t)
    }
}

impl Run {
    /// The restarts of Redis with no data, as (start, end of the window around it where the
    /// guarantees do not hold).
    fn wipes(&self) -> Vec<(u64, u64)> {
        let lease = self.lease_ms * 1_000_000;
        self.faults
            .iter()
            .filter(|f| f.kind == FaultKind::Restart)
            .map(|f| (f.t.saturating_sub(lease), f.t_end + 3 * lease))
            .collect()
    }

    fn outside(&self, t: u64) -> bool {
        self.wipes().iter().any(|&(a, b)| a <= t && t <= b)
    }

    /// Which epoch (between restarts of Redis) `t` falls in: fences start over in each.
    fn epoch(&self, t: u64) -> usize {
        self.faults.iter().filter(|f| f.kind == FaultKind::Restart && f.t <= t).count()
    }

    /// Checks the run.
    pub fn check(&self) -> Report {
        let mut report = Report {
            lease_ms: self.lease_ms,
            durability: self.durability,
            faults: self.faults.clone(),
            messages_sent: self.acked.len() as u64,
            ..Report::default()
        };
        let let_go = LetGo::new(&self.history);
        // Per send, in `sent` order: whether it was in flight across a stop of its replica.
        let across: Vec<bool> =
            self.sent.iter().map(|s| let_go.across_stop(&self.faults, s)).collect();
        self.check_replies(&let_go, &across, &mut report);
        self.check_turns(&across, &mut report);
        self.check_takeovers(&mut report);
        report
    }

    fn check_replies(&self, let_go: &LetGo<'_>, across_stop: &[bool], report: &mut Report) {
        // First reply of each message (and whether it was in flight across a stop); duplicate
        // sends.
        let mut first: HashMap<(u32, u32), u64> = HashMap::new();
        let mut across: HashSet<(u32, u32, u64)> = HashSet::new();
        let mut seen: HashMap<(u32, u32, &str), u64> = HashMap::new();
        for (s, &late) in self.sent.iter().zip(across_stop) {
            let f = first.entry((s.chat, s.seq)).or_insert(s.t);
            *f = (*f).min(s.t);
            if late {
                report.outside_guarantees.sends_across_stops += 1;
                across.insert((s.chat, s.seq, s.t));
            }
            if let Some(&earlier) = seen.get(&(s.chat, s.seq, s.kind.as_str())) {
                if self.outside(earlier) || self.outside(s.t) {
                    report.outside_guarantees.duplicate_sends += 1;
                } else {
                    report.duplicate_sends += 1;
                }
            } else {
                seen.insert((s.chat, s.seq, s.kind.as_str()), s.t);
            }
        }
        report.messages_replied = first.len() as u64;

        let mut handled: HashMap<(u32, u32), u64> = HashMap::new();
        for r in &self.history {
            if let Record::Handled { chat, seq, .. } = r {
                *handled.entry((*chat, *seq)).or_default() += 1;
            }
        }
        report.messages_handled = handled.len() as u64;
        report.duplicate_handled = handled.values().filter(|&&n| n > 1).map(|n| n - 1).sum();

        // Lost: acknowledged, never answered. A loss is put down to a fault only when the
        // message was still waiting in line as the fault hit: no later message of its chat had
        // been answered by then. One a later message overtook was lost with nothing to blame.
        // Each chat's first replies, by message number.
        let mut by_chat: BTreeMap<u32, Vec<(u32, u64)>> = BTreeMap::new();
        for (&(chat, seq), &t) in &first {
            by_chat.entry(chat).or_default().push((seq, t));
        }
        for replies in by_chat.values_mut() {
            replies.sort_unstable();
        }
        let overtaken = Overtaken::new(&by_chat);
        let lease = self.lease_ms * 1_000_000;
        for a in &self.acked {
            if first.contains_key(&(a.chat, a.seq)) {
                continue;
            }
            let waiting_at = |t: u64| overtaken.first_after(a.chat, a.seq).is_none_or(|o| o > t);
            // The first fault after the acknowledgement that could take the message with it:
            // a restart of Redis with no data, or the death or freeze of the replica holding it.
            // Taken before the fault began, acknowledged after: the acknowledgement was on its
            // way out as the replica froze (or died).
            let decided = let_go.decided_at(a.chat, a.seq, &a.replica, a.t);
            let next = self
                .faults
                .iter()
                .filter(|f| {
                    f.t + IN_FLIGHT >= a.t || decided.is_some_and(|t| t <= f.t && f.t <= a.t)
                })
                .filter(|f| match f.kind {
                    FaultKind::Restart => true,
                    FaultKind::Kill | FaultKind::Stop => {
                        f.replica.as_deref() == Some(a.replica.as_str())
                    }
                    FaultKind::Pause | FaultKind::ClientKill => false,
                })
                .min_by_key(|f| f.t)
                .filter(|f| waiting_at(f.t));
            // Acknowledged around a restart of Redis with no data (the window every other
            // check counts apart too), or waiting when one came.
            if self.outside(a.t) || next.is_some_and(|f| f.kind == FaultKind::Restart) {
                report.outside_guarantees.lost += 1;
                continue;
            }
            // Without durability the spec lets a message go when the replica holding it died
            // (or froze past its lease) before handling it, or when Redis failed around it (a
            // turn it could not get, a send refused after the replica stalled): both reported
            // as errors by the bot.
            let blamed = (!self.durability)
                .then(|| {
                    next.or_else(|| {
                        self.faults.iter().find(|f| {
                            matches!(f.kind, FaultKind::Pause | FaultKind::ClientKill)
                                && f.t <= a.t + 2 * lease
                                && a.t <= f.t_end + 2 * lease
                        })
                    })
                })
                .flatten();
            match blamed {
                Some(f) => {
                    report.lost_allowed += 1;
                    report.accounted.push(Accounted {
                        chat: a.chat,
                        seq: a.seq,
                        replica: a.replica.clone(),
                        fault: f.kind,
                        waited_ms: f.t.saturating_sub(a.t) / 1_000_000,
                    });
                }
                None => {
                    report.lost += 1;
                    if report.lost_examples.len() < 50 {
                        report.lost_examples.push((a.chat, a.seq));
                    }
                }
            }
        }

        // Order: per chat, first replies by message number must come in time order.
        for (&chat, replies) in &by_chat {
            let mut latest: Option<(u64, bool)> = None;
            for &(seq, t) in replies.iter() {
                match latest {
                    Some((l, late)) if t < l => {
                        if late
                            || self.outside(t)
                            || self.outside(l)
                            || self.epoch(t) != self.epoch(l)
                        {
                            report.outside_guarantees.order_violations += 1;
                        } else {
                            report.order_violations += 1;
                        }
                    }
                    _ => latest = Some((t, across.contains(&(chat, seq, t)))),
                }
            }
        }
    }

    /// Overlapping turns and stale checkpoint writes, per chat and epoch, by fence. A turn
    /// starts when its grant arrived (or, lacking a record of it, at its first handler) and
    /// its effects are the replies sent under its fence.
    fn check_turns(&self, across_stop: &[bool], report: &mut Report) {
        type Key = (u32, usize);
        let mut spans: HashMap<Key, BTreeMap<u64, Span>> = HashMap::new();
        // Each replica's grants per chat, in time order, for attributing its checkpoint writes.
        let mut grants: HashMap<(u32, &str), Vec<(u64, u64)>> = HashMap::new();
        let mut start = |chat: u32, fence: u64, t: u64| {
            let span = spans
                .entry((chat, self.epoch(t)))
                .or_default()
                .entry(fence)
                .or_insert(Span { start: t, last_effect: None, last_inside: None });
            span.start = span.start.min(t);
        };
        for r in &self.history {
            match r {
                Record::Grant { chat, replica, fence, t, .. } => {
                    start(*chat, *fence, *t);
                    grants.entry((*chat, replica.as_str())).or_default().push((*t, *fence));
                }
                Record::Handled { chat, fence, t, .. } => start(*chat, *fence, *t),
                _ => {}
            }
        }
        for s in &self.sent {
            start(s.chat, s.fence, s.t);
        }
        for list in grants.values_mut() {
            list.sort_unstable();
        }
        let later = |e: Option<u64>, t: u64| Some(e.map_or(t, |e| e.max(t)));
        for (s, &across) in self.sent.iter().zip(across_stop) {
            if let Some(span) =
                spans.get_mut(&(s.chat, self.epoch(s.t))).and_then(|f| f.get_mut(&s.fence))
            {
                span.last_effect = later(span.last_effect, s.t);
                if !across {
                    span.last_inside = later(span.last_inside, s.t);
                }
            }
        }
        for fences in spans.values() {
            // Ascending fences: no lower fence may have an effect after a higher one started.
            // `inside` leaves out the sends in flight across a stop.
            let (mut latest, mut inside): (Option<u64>, Option<u64>) = (None, None);
            for span in fences.values() {
                if let Some(l) = latest
                    && l > span.start
                {
                    let only_across = inside.is_none_or(|i| i <= span.start);
                    if only_across || self.outside(l) || self.outside(span.start) {
                        report.outside_guarantees.overlaps += 1;
                    } else {
                        report.overlaps += 1;
                    }
                }
                if let Some(e) = span.last_effect {
                    latest = later(latest, e);
                }
                if let Some(e) = span.last_inside {
                    inside = later(inside, e);
                }
            }
        }
        // A checkpoint write belongs to the writer's latest turn on the chat; it is stale when
        // a higher fence had been granted on the chat before the write was issued.
        for r in &self.history {
            let Record::Checkpoint { chat, replica, t, .. } = r else { continue };
            let Some(list) = grants.get(&(*chat, replica.as_str())) else { continue };
            let i = list.partition_point(|&(g, _)| g <= *t);
            let Some(&(_, fence)) = i.checked_sub(1).and_then(|j| list.get(j)) else { continue };
            let Some(fences) = spans.get(&(*chat, self.epoch(*t))) else { continue };
            if fences.range(fence + 1..).any(|(_, span)| span.start < *t) {
                if self.outside(*t) {
                    report.outside_guarantees.stale_writes += 1;
                } else {
                    report.stale_writes += 1;
                }
            }
        }
    }

    /// For each kill: how long until every chat the dead replica left waiting moved again.
    fn check_takeovers(&self, report: &mut Report) {
        let replied: HashMap<(u32, u32), u64> =
            self.sent.iter().fold(HashMap::new(), |mut m, s| {
                let e = m.entry((s.chat, s.seq)).or_insert(s.t);
                *e = (*e).min(s.t);
                m
            });
        let mut sent_by_chat: HashMap<u32, Vec<u64>> = HashMap::new();
        for s in &self.sent {
            sent_by_chat.entry(s.chat).or_default().push(s.t);
        }
        for list in sent_by_chat.values_mut() {
            list.sort_unstable();
        }
        let mut last_grant: HashMap<u32, Vec<(u64, &str)>> = HashMap::new();
        for r in &self.history {
            if let Record::Grant { chat, replica, t, .. } = r {
                last_grant.entry(*chat).or_default().push((*t, replica.as_str()));
            }
        }
        for grants in last_grant.values_mut() {
            grants.sort_unstable();
        }
        for kill in self.faults.iter().filter(|f| f.kind == FaultKind::Kill) {
            let Some(dead) = kill.replica.as_deref() else { continue };
            if self.outside(kill.t) {
                continue;
            }
            // Chats with a message unanswered at the kill that the dead replica acknowledged,
            // or that waited behind a turn the dead replica was the last to be granted.
            let unanswered = self
                .acked
                .iter()
                .filter(|a| a.t < kill.t)
                .filter(|a| replied.get(&(a.chat, a.seq)).is_none_or(|&r| r > kill.t));
            let waiting: BTreeSet<u32> = unanswered
                .filter(|a| {
                    a.replica == dead
                        || last_grant
                            .get(&a.chat)
                            .and_then(|g| {
                                let i = g.partition_point(|(t, _)| *t < kill.t);
                                i.checked_sub(1).and_then(|j| g.get(j))
                            })
                            .is_some_and(|(_, r)| *r == dead)
                })
                .map(|a| a.chat)
                .collect();
            let mut worst = 0;
            for chat in waiting {
                let Some(list) = sent_by_chat.get(&chat) else { continue };
                let i = list.partition_point(|&t| t <= kill.t);
                if let Some(&t) = list.get(i) {
                    worst = worst.max((t - kill.t) / 1_000_000);
                }
            }
            report.takeovers_ms.push(worst);
        }
        report.takeover_max_ms = report.takeovers_ms.iter().copied().max().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests;
