//! The rendezvous through which a waiting conversation receives its next message: the
//! worker delivers into the chat's `Link`, and the conversation's future waits on it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::Message;

/// What a waiting conversation is woken with.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one input per wake-up, moved once; boxing would allocate per message"
)]
pub(crate) enum Input {
    Message(Message),
    Idle(Duration),
}

/// How a parked conversation waits: the timers the chat worker arms for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Park {
    pub(crate) timeout: Option<Duration>,
    pub(crate) idle: Option<Duration>,
}

/// The rendezvous between a chat worker and the conversation future it drives.
///
/// The worker polls the conversation's future itself. When the conversation awaits its next
/// message and none is there, [`Wait`] records that it is parked; the worker sees that after
/// the poll and treats the conversation as waiting again, which ends the message's turn.
#[derive(Debug, Default)]
pub(crate) struct Link {
    st: Mutex<LinkState>,
}

#[derive(Debug, Default)]
struct LinkState {
    inbox: Option<Input>,
    parked: Option<Park>,
    waker: Option<Waker>,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        // The critical sections below run no user code and cannot panic.
        self.st.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn deliver(&self, input: Input) {
        let mut st = self.lock();
        st.inbox = Some(input);
        st.parked = None;
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    pub(crate) fn parked(&self) -> Option<Park> {
        self.lock().parked
    }

    /// Whether a message is already waiting to be taken (one kept from a hand-over).
    pub(super) fn has_message(&self) -> bool {
        matches!(self.lock().inbox, Some(Input::Message(_)))
    }

    /// Takes a message nobody took (the conversation ended before its next wait).
    pub(crate) fn take_message(&self) -> Option<Message> {
        let mut st = self.lock();
        match st.inbox.take() {
            Some(Input::Message(m)) => Some(m),
            other => {
                st.inbox = other;
                None
            }
        }
    }

    pub(super) fn wait(&self, park: Park) -> Wait<'_> {
        Wait { link: self, park }
    }
}

pub(super) struct Wait<'a> {
    link: &'a Link,
    park: Park,
}

impl Future for Wait<'_> {
    type Output = Input;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Input> {
        let mut st = self.link.lock();
        if let Some(input) = st.inbox.take() {
            return Poll::Ready(input);
        }
        st.parked = Some(self.park);
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
