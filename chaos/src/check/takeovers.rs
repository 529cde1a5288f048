//! How long the chats a killed replica left waiting took to move again.

use std::collections::{BTreeSet, HashMap};

use super::input::{FaultKind, Run};
use super::report::Report;
use crate::record::Record;

impl Run {
    /// For each kill: how long until every chat the dead replica left waiting moved again.
    pub(super) fn check_takeovers(&self, report: &mut Report) {
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
