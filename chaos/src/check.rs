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
//! delivery, `Record::Ticketed`), so only those count as such. Polls of the exclusive
//! transport are read the same way (`Record::Polling`).
//!
//! - `input.rs`: what it reads; `report.rs`: what it finds;
//! - `replies.rs`: duplicates, losses and order; `turns.rs`: overlapping turns and stale
//!   checkpoint writes; `takeovers.rs`: how long chats waited after a kill; `transport.rs`:
//!   the exclusive transport's sessions;
//! - `in_flight.rs`: what a replica let go before it froze;
//! - `files.rs`: a run as the harness leaves it on disk, read back to check it again.

mod files;
mod in_flight;
mod input;
mod replies;
mod report;
mod takeovers;
mod transport;
mod turns;

pub use self::files::Settings;
pub use self::input::{Acked, Fault, FaultKind, Polled, Run, Sent, Session};
pub use self::report::{Accounted, Outside, Report};

use self::in_flight::LetGo;

impl Run {
    /// The faults outside the guarantees, as (start, end of the window around it where the
    /// guarantees do not hold): restarts of Redis with no data, and failovers unless grants
    /// waited for the replica.
    fn wipes(&self) -> Vec<(u64, u64)> {
        let lease = self.lease_ms * 1_000_000;
        self.faults
            .iter()
            .filter(|f| self.beyond(f.kind))
            .map(|f| (f.t.saturating_sub(lease), f.t_end + 3 * lease))
            .collect()
    }

    /// Whether faults of `kind` lie outside the guarantees on this run.
    fn beyond(&self, kind: FaultKind) -> bool {
        match kind {
            FaultKind::Restart => true,
            FaultKind::Failover => !self.wait_replicas,
            _ => false,
        }
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
        self.check_grants(&mut report);
        self.check_takeovers(&mut report);
        self.check_transport(&let_go, &mut report);
        report
    }
}

#[cfg(test)]
mod tests;
