//! The turns: overlapping turns of one chat, and stale checkpoint writes.

use std::collections::{BTreeMap, HashMap};

use super::input::Run;
use super::report::Report;
use crate::record::Record;

/// One effect or start of a turn, for the overlap and stale-write checks.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u64,
    last_effect: Option<u64>,
    /// The last effect that was not in flight across a stop of its replica.
    last_inside: Option<u64>,
}

impl Run {
    /// Overlapping turns and stale checkpoint writes, per chat and epoch, by fence. A turn
    /// starts when its grant arrived (or, lacking a record of it, at its first handler) and
    /// its effects are the replies sent under its fence.
    pub(super) fn check_turns(&self, across_stop: &[bool], report: &mut Report) {
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

    /// Double grants: per chat and epoch, a fence granted more than once. Fences come from
    /// one counter per chat that only grows, so a fence granted again means the grant history
    /// went back (a failover lost the writes that took it further) and two holders may act
    /// under one fence. A grant is compared by its fence, not by when its replica wrote it
    /// down: a replica frozen while its ticket call was out writes a grant down late, after
    /// higher fences were granted to others, without anything having gone back.
    pub(super) fn check_grants(&self, report: &mut Report) {
        let mut granted: HashMap<(u32, usize, u64), Vec<u64>> = HashMap::new();
        for r in &self.history {
            if let Record::Grant { chat, fence, t, .. } = r {
                granted.entry((*chat, self.epoch(*t), *fence)).or_default().push(*t);
            }
        }
        for times in granted.values_mut() {
            times.sort_unstable();
            for &t in &times[1..] {
                if self.outside(t) {
                    report.outside_guarantees.double_grants += 1;
                } else {
                    report.double_grants += 1;
                }
            }
        }
    }
}
