//! The replies: duplicates, losses (and the faults that explain them), and each chat's order.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::in_flight::{IN_FLIGHT, LetGo};
use super::input::{Fault, FaultKind, Run};
use super::report::{Accounted, Report};
use crate::record::Record;

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
    pub(super) fn check_replies(
        &self,
        let_go: &LetGo<'_>,
        across_stop: &[bool],
        report: &mut Report,
    ) {
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
            // The faults after the acknowledgement that could take the message with it: a
            // restart of Redis with no data or a failover that lost writes, and the death or
            // freeze of the replica holding it. Taken before the fault began, acknowledged
            // after: the acknowledgement was on its way out as the replica froze (or died).
            let decided = let_go.decided_at(a.chat, a.seq, &a.replica, a.t);
            let after = |f: &&Fault| {
                f.t + IN_FLIGHT >= a.t || decided.is_some_and(|t| t <= f.t && f.t <= a.t)
            };
            // A wipe that found it still waiting took it, whatever came before: a message
            // journaled on a replica that died is gone with the journal, taken over or not.
            // How long it had waited is in the report, so a wipe cannot hide a takeover that
            // should have come long before.
            let wiped = self
                .faults
                .iter()
                .filter(after)
                .filter(|f| self.beyond(f.kind) && waiting_at(f.t))
                .min_by_key(|f| f.t);
            if self.outside(a.t) || wiped.is_some() {
                report.outside_guarantees.lost += 1;
                if let Some(f) = wiped {
                    report.wiped.push(Accounted::new(a, f));
                }
                continue;
            }
            // Else the first death or freeze of the replica holding it, if it was still
            // waiting then.
            let next = self
                .faults
                .iter()
                .filter(after)
                .filter(|f| match f.kind {
                    FaultKind::Kill | FaultKind::Stop | FaultKind::Starve => {
                        f.replica.as_deref() == Some(a.replica.as_str())
                    }
                    _ => false,
                })
                .min_by_key(|f| f.t)
                .filter(|f| waiting_at(f.t));
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
                    report.accounted.push(Accounted::new(a, f));
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
}
