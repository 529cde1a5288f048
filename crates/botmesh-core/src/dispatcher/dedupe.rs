//! Drops the messages this process already has, and tells a redelivery of one still being
//! taken to come back later.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{Accepted, lock};
use crate::Result;

/// A message's provider and id.
type Id = (String, String);

/// Where a remembered message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Queued, but its sender still waits to hear whether it was taken (journaled, ticketed):
    /// it may yet be refused.
    Pending,
    /// Taken: a redelivery is a duplicate.
    Taken,
}

/// Remembers the last `capacity` message ids.
pub(super) struct Dedupe {
    seen: HashMap<Id, Seen>,
    order: VecDeque<Id>,
    capacity: usize,
}

impl Dedupe {
    pub(super) fn new(capacity: usize) -> Self {
        Self { seen: HashMap::new(), order: VecDeque::new(), capacity }
    }

    /// Remembers a message arriving as `state`, or says where it stood when it was seen before.
    pub(super) fn admit(&mut self, provider: &str, id: &str, state: Seen) -> Option<Seen> {
        if self.capacity == 0 {
            return None;
        }
        let entry = (provider.to_owned(), id.to_owned());
        if let Some(seen) = self.seen.get(&entry) {
            return Some(*seen);
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.seen.insert(entry.clone(), state);
        self.order.push_back(entry);
        None
    }

    fn settle(&mut self, id: &Id, taken: bool) {
        match taken {
            true => {
                if let Some(seen) = self.seen.get_mut(id) {
                    *seen = Seen::Taken;
                }
            }
            // Forgotten, so that the sender's next delivery of a refused message is taken.
            false => {
                self.seen.remove(id);
            }
        }
    }
}

/// The sender of a message waiting in [`Dispatcher::accept`](super::Dispatcher::accept) to
/// hear whether it was taken. Answering settles the message's dedupe entry whether or not the
/// sender still listens (its request may have timed out): taken, a redelivery is a duplicate;
/// refused, or dropped unanswered, the redelivery is taken afresh.
pub(super) struct Waiter {
    tx: Option<oneshot::Sender<Result<Accepted>>>,
    dedupe: Arc<Mutex<Dedupe>>,
    id: Id,
}

impl Waiter {
    pub(super) fn new(
        tx: oneshot::Sender<Result<Accepted>>,
        dedupe: Arc<Mutex<Dedupe>>,
        id: Id,
    ) -> Self {
        Self { tx: Some(tx), dedupe, id }
    }

    pub(super) fn send(mut self, answer: Result<Accepted>) {
        lock(&self.dedupe).settle(&self.id, answer.is_ok());
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(answer);
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.tx.is_some() {
            // Never answered: the job was dropped (the bot stopped). Not taken here.
            lock(&self.dedupe).settle(&self.id, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_pending_until_its_sender_hears_and_forgotten_when_refused() {
        let dedupe = Arc::new(Mutex::new(Dedupe::new(10)));
        let waiter = |id: &str| {
            let (tx, _rx) = oneshot::channel();
            Waiter::new(tx, Arc::clone(&dedupe), ("p".to_owned(), id.to_owned()))
        };
        assert_eq!(lock(&dedupe).admit("p", "a", Seen::Pending), None);
        assert_eq!(lock(&dedupe).admit("p", "a", Seen::Pending), Some(Seen::Pending));
        waiter("a").send(Ok(Accepted::Queued));
        assert_eq!(lock(&dedupe).admit("p", "a", Seen::Pending), Some(Seen::Taken));

        assert_eq!(lock(&dedupe).admit("p", "b", Seen::Pending), None);
        waiter("b").send(Err(crate::BotError::NotRunning));
        assert_eq!(lock(&dedupe).admit("p", "b", Seen::Pending), None, "refused: taken afresh");

        drop(waiter("b"));
        assert_eq!(lock(&dedupe).admit("p", "b", Seen::Pending), None, "dropped: taken afresh");
    }
}
