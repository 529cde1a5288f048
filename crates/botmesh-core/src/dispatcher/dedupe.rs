//! Drops the messages this process already has, and tells a redelivery of one still being
//! taken to come back later.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{Accepted, lock};
use crate::Result;

/// A message's provider and id, in one string: the provider's length, a colon, the provider,
/// then the id (unambiguous whatever either holds). Shared by the map, the eviction order and
/// a waiting sender, so a new message costs one allocation, the shared string itself.
type Id = Arc<str>;

/// Runs `f` on the [`Id`] text of message `id` from `provider`, written on the stack when it is
/// short (as message ids are), so that looking it up allocates nothing.
fn with_id_of<R>(provider: &str, id: &str, f: impl FnOnce(&str) -> R) -> R {
    use std::io::Write;
    let write = |out: &mut dyn Write| write!(out, "{}:{provider}{id}", provider.len());
    const ROOM: usize = 128;
    let mut buf = [0u8; ROOM];
    let mut at = &mut buf[..];
    let fits = write(&mut at).is_ok();
    let len = ROOM - at.len();
    if fits && let Ok(text) = std::str::from_utf8(&buf[..len]) {
        return f(text);
    }
    let mut long = Vec::new();
    // Writing into a vector cannot fail, and both parts are strings.
    let _ = write(&mut long);
    f(&String::from_utf8_lossy(&long))
}

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

    /// Admits message `id` from `provider` as `state` and returns its [`Id`] (for a waiting
    /// sender), or says how this process already has it.
    pub(super) fn admit(&mut self, provider: &str, id: &str, state: Seen) -> Result<Id, Seen> {
        with_id_of(provider, id, |entry| self.admit_id(entry, state))
    }

    /// [`Dedupe::admit`] of the [`Id`] text `entry`.
    fn admit_id(&mut self, entry: &str, state: Seen) -> Result<Id, Seen> {
        if self.capacity == 0 {
            return Ok(entry.into());
        }
        if let Some(seen) = self.seen.get(entry) {
            return Err(*seen);
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        let entry: Id = entry.into();
        self.seen.insert(Arc::clone(&entry), state);
        self.order.push_back(Arc::clone(&entry));
        Ok(entry)
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
            Waiter::new(tx, Arc::clone(&dedupe), with_id_of("p", id, |text: &str| Id::from(text)))
        };
        assert!(lock(&dedupe).admit("p", "a", Seen::Pending).is_ok());
        assert_eq!(lock(&dedupe).admit("p", "a", Seen::Pending), Err(Seen::Pending));
        waiter("a").send(Ok(Accepted::Queued));
        assert_eq!(lock(&dedupe).admit("p", "a", Seen::Pending), Err(Seen::Taken));

        assert!(lock(&dedupe).admit("p", "b", Seen::Pending).is_ok());
        waiter("b").send(Err(crate::BotError::NotRunning));
        assert!(lock(&dedupe).admit("p", "b", Seen::Pending).is_ok(), "refused: taken afresh");

        drop(waiter("b"));
        assert!(lock(&dedupe).admit("p", "b", Seen::Pending).is_ok(), "dropped: taken afresh");
    }

    #[test]
    fn ids_of_different_providers_never_collide() {
        let mut dedupe = Dedupe::new(10);
        assert!(dedupe.admit("ab", "c", Seen::Taken).is_ok());
        assert!(dedupe.admit("a", "bc", Seen::Taken).is_ok(), "another provider's message");
        assert_eq!(dedupe.admit("ab", "c", Seen::Taken), Err(Seen::Taken));
    }

    #[test]
    fn an_id_too_long_for_the_stack_is_remembered_the_same() {
        let long = "x".repeat(300);
        let mut dedupe = Dedupe::new(10);
        let id = dedupe.admit("telegram", &long, Seen::Taken).expect("new");
        assert_eq!(&*id, format!("8:telegram{long}"));
        assert_eq!(dedupe.admit("telegram", &long, Seen::Taken), Err(Seen::Taken));
        assert!(dedupe.admit("telegram", &long[1..], Seen::Taken).is_ok(), "another id");
    }
}
