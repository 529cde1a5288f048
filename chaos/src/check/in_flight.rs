//! What a replica let go before it froze: the replies it handed its HTTP client and the
//! deliveries it took, each written down with the moment (`Record::Sending`,
//! `Record::Accepted`, and for a delivery the ticket call that decided it,
//! `Record::Ticketed`). A process stopped with either on its way out finishes it when it runs
//! again, so the platform or the load generator sees it late.

use std::collections::HashMap;

use super::input::{Fault, Polled, Sent};
use crate::record::Record;

/// How long an acknowledgement may take from the replica that sent it to the load generator,
/// in ns: a replica frozen or killed this soon before the acknowledgement arrived had sent it
/// already, with the message still waiting in it (whatever its `Record::Accepted` says).
pub(super) const IN_FLIGHT: u64 = 250_000_000;

/// When each reply and each delivery was let go, indexed once for the whole run.
pub(super) struct LetGo<'a> {
    /// By (chat, message, kind, fence, replica).
    sends: HashMap<(u32, u32, &'a str, u64, &'a str), Vec<u64>>,
    /// By (chat, message, replica).
    taken: HashMap<(u32, u32, &'a str), Vec<u64>>,
    /// Ticket calls, by (chat, replica).
    ticketed: HashMap<(u32, &'a str), Vec<u64>>,
    /// Polls, by session.
    polls: HashMap<u64, Vec<u64>>,
}

impl<'a> LetGo<'a> {
    pub(super) fn new(history: &'a [Record]) -> Self {
        let mut let_go = Self {
            sends: HashMap::new(),
            taken: HashMap::new(),
            ticketed: HashMap::new(),
            polls: HashMap::new(),
        };
        for r in history {
            match r {
                Record::Sending { chat, seq, kind, fence, replica, t } => let_go
                    .sends
                    .entry((*chat, *seq, kind.as_str(), *fence, replica.as_str()))
                    .or_default()
                    .push(*t),
                Record::Accepted { chat, seq, replica, t } => {
                    let_go.taken.entry((*chat, *seq, replica.as_str())).or_default().push(*t);
                }
                Record::Ticketed { chat, replica, t, .. } => {
                    let_go.ticketed.entry((*chat, replica.as_str())).or_default().push(*t);
                }
                Record::Polling { session, t, .. } => {
                    let_go.polls.entry(*session).or_default().push(*t);
                }
                _ => {}
            }
        }
        let_go
    }

    /// Whether send `s` passed its turn's check before a stop of its replica began and reached
    /// the platform after: in flight across the freeze.
    pub(super) fn across_stop(&self, faults: &[Fault], s: &Sent) -> bool {
        let key = (s.chat, s.seq, s.kind.as_str(), s.fence, s.replica.as_str());
        let Some(let_go) = self.sends.get(&key).and_then(|ts| latest(ts, s.t)) else {
            return false;
        };
        stopped_between(faults, &s.replica, let_go, s.t)
    }

    /// Whether poll `p` was let go before a stop of its replica began and reached the platform
    /// after.
    pub(super) fn poll_across_stop(&self, faults: &[Fault], p: &Polled) -> bool {
        let Some(let_go) = self.polls.get(&p.session).and_then(|ts| latest(ts, p.start)) else {
            return false;
        };
        stopped_between(faults, &p.replica, let_go, p.start)
    }

    /// By when `replica` had decided to take message `seq` of `chat`, acknowledged at `acked`:
    /// when it wrote down the delivery (`Record::Accepted`), or earlier, when its last ticket
    /// call for the chat before `acked` returned. A message taken in is ticketed before its
    /// verdict, so with no ticket call between that one and the acknowledgement, the
    /// message's ticket was among that call's.
    pub(super) fn decided_at(&self, chat: u32, seq: u32, replica: &str, acked: u64) -> Option<u64> {
        let accepted = self.taken.get(&(chat, seq, replica)).and_then(|ts| latest(ts, acked));
        let ticketed = self.ticketed.get(&(chat, replica)).and_then(|ts| latest(ts, acked));
        accepted.into_iter().chain(ticketed).min()
    }
}

/// Whether `replica` was stopped (a stop, or a burst of a starve) at some moment from `from`
/// to `to`.
fn stopped_between(faults: &[Fault], replica: &str, from: u64, to: u64) -> bool {
    faults
        .iter()
        .filter(|f| f.replica.as_deref() == Some(replica))
        .any(|f| f.stops().into_iter().any(|t| from <= t && t <= to))
}

/// The latest of the moments `ts` no later than `until`.
fn latest(ts: &[u64], until: u64) -> Option<u64> {
    ts.iter().copied().filter(|&t| t <= until).max()
}
