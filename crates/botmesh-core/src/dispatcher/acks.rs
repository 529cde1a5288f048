//! Acknowledgements written beside the chats' work, many in one store call.
//!
//! Nothing on a chat's path waits for a handled message's acknowledgement: the chat's next
//! message may run at once (its turn passed on here), and the job is done. So a job queues the
//! acknowledgement here and ends. The first one queued while no write is under way starts a
//! task that writes everything queued in one call
//! ([`JournalStore::inbox_ack_batch`](botmesh_traits::JournalStore::inbox_ack_batch)), then
//! what queued meanwhile, until the queue is empty. Under load, the acknowledgements of many
//! chats share a call, and no job holds its task, its memory and a wake-up for a round trip.
//!
//! What does not land goes to the repair queue, as before. Until every queued acknowledgement
//! landed or went there, the bot is not idle ([`Bot::wait_idle`](crate::Bot::wait_idle)), and
//! [`Bot::stop`](crate::Bot::stop) waits for them. A replica that dies with acknowledgements
//! queued leaves their messages pending, to be handled again where they are taken over: the
//! same window an acknowledgement on the wire always left, plus the call in front of it.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use botmesh_traits::{ChatKey, Error};
use futures_util::FutureExt;
use tokio::sync::Notify;

use crate::lock::lock;
use crate::repair::Repair;
use crate::shared::Shared;

/// The acknowledgements still to write.
#[derive(Default)]
pub(super) struct Acks {
    state: Mutex<Queue>,
    /// Told when the queue is empty and no write is under way.
    settled: Notify,
}

#[derive(Default)]
struct Queue {
    /// Queued: the chats (for reporting) and the journal ids, in the same order.
    keys: Vec<ChatKey>,
    ids: Vec<String>,
    /// Whether a task is writing.
    writing: bool,
}

impl Acks {
    /// Queues the acknowledgement of journaled message `id` of chat `key`.
    pub(super) fn push(self: &Arc<Self>, shared: &Arc<Shared>, key: &ChatKey, id: String) {
        let start = {
            let mut queue = lock(&self.state);
            queue.keys.push(key.clone());
            queue.ids.push(id);
            !std::mem::replace(&mut queue.writing, true)
        };
        if start {
            tokio::spawn(Arc::clone(self).write(Arc::clone(shared)));
        }
    }

    /// Whether everything queued landed or went to the repair queue.
    pub(super) fn is_settled(&self) -> bool {
        !lock(&self.state).writing
    }

    /// Waits until [`is_settled`](Self::is_settled).
    pub(super) async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            if self.is_settled() {
                return;
            }
            notified.await;
        }
    }

    /// Writes what is queued, batch after batch, until the queue is empty.
    async fn write(self: Arc<Self>, shared: Arc<Shared>) {
        loop {
            let (keys, ids) = {
                let mut queue = lock(&self.state);
                if queue.ids.is_empty() {
                    queue.writing = false;
                    drop(queue);
                    self.settled.notify_waiters();
                    return;
                }
                (std::mem::take(&mut queue.keys), std::mem::take(&mut queue.ids))
            };
            // A store that panics fails the call instead of leaving the queue unwritten.
            let written = AssertUnwindSafe(async { shared.inbox()?.inbox_ack_batch(&ids).await })
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    let message = super::panic_message(&*panic);
                    Err(Error::store("inbox_ack_batch", format!("the store panicked: {message}")))
                });
            if let Err(e) = written {
                // Reported once per call, for its chat when it carried one message.
                let key = keys.first().filter(|_| keys.len() == 1);
                shared.events.error(key, e.into());
                for (key, id) in keys.into_iter().zip(ids) {
                    shared.repairs.push(Repair::Ack { key, id });
                }
            }
        }
    }
}
