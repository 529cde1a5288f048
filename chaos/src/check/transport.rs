//! The exclusive transport: no two replicas on its session at once, and how long a standby
//! took to poll after the replica that held it was killed or stopped.
//!
//! A session is superseded once another replica opened a newer one. A poll of a superseded
//! session that reached the platform, or was still in flight there, after the newer session
//! opened is an overlap: two replicas acted on the transport at once. One let go before its
//! replica was stopped and arriving after is counted apart (a poll, like a send, checks the
//! replica's lease right before it goes, and a frozen process lets it go only when it runs
//! again).

use std::collections::HashMap;

use super::in_flight::LetGo;
use super::input::{FaultKind, Run, Session};
use super::report::Report;

impl Run {
    pub(super) fn check_transport(&self, let_go: &LetGo<'_>, report: &mut Report) {
        report.polling_sessions = self.sessions.len() as u64;
        let sessions: HashMap<u64, &Session> = self.sessions.iter().map(|s| (s.id, s)).collect();
        for p in &self.polls {
            let Some(own) = sessions.get(&p.session) else { continue };
            // The first newer session of another replica that opened before this poll ended.
            let superseded = self
                .sessions
                .iter()
                .filter(|s| s.replica != own.replica && s.opened > own.opened && s.opened < p.end)
                .map(|s| s.opened)
                .min();
            let Some(superseded) = superseded else { continue };
            if let_go.poll_across_stop(&self.faults, p) {
                report.outside_guarantees.polls_across_stops += 1;
            } else if self.outside(p.start) || self.outside(superseded) {
                report.outside_guarantees.transport_overlaps += 1;
            } else {
                report.transport_overlaps += 1;
            }
        }
        self.check_transport_takeovers(report);
    }

    /// For each kill or stop of the replica whose session was the newest at the time: how long
    /// until a session of another replica polled.
    fn check_transport_takeovers(&self, report: &mut Report) {
        for fault in &self.faults {
            if !matches!(fault.kind, FaultKind::Kill | FaultKind::Stop) || self.outside(fault.t) {
                continue;
            }
            let holder =
                self.sessions.iter().filter(|s| s.opened <= fault.t).max_by_key(|s| s.opened);
            let Some(holder) = holder else { continue };
            let held = holder.closed.is_none_or(|c| c > fault.t);
            if !held || fault.replica.as_deref() != Some(holder.replica.as_str()) {
                continue;
            }
            let next = self
                .polls
                .iter()
                .filter(|p| p.replica != holder.replica && p.start > fault.t)
                .map(|p| p.start)
                .min();
            if let Some(next) = next {
                report.transport_takeovers_ms.push((next - fault.t) / 1_000_000);
            }
        }
        report.transport_takeover_max_ms =
            report.transport_takeovers_ms.iter().copied().max().unwrap_or(0);
    }
}
