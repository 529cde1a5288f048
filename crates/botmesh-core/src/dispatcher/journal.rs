//! The journal as a turn sees it: the dispatcher implements the seam's
//! [`Journal`](crate::coordination::Journal) over the bot's store, its repair queue, and the
//! count of how many times each message failed here.

use std::sync::Arc;

use botmesh_traits::{ChatKey, Error, InboxRecord, InboxState, MessageId, async_trait};

use super::{Dispatcher, lock};
use crate::coordination::{Claim, Journal, RELEASED};
use crate::durable;
use crate::{BotError, Event};

#[async_trait]
impl Journal for Dispatcher {
    fn owner(&self) -> &str {
        &self.shared.owner
    }

    async fn pending_for(&self, key: &ChatKey, limit: usize) -> Result<Vec<InboxRecord>, Error> {
        self.shared.inbox()?.inbox_pending_for(key, limit).await
    }

    async fn get(&self, id: &str) -> Result<Option<InboxRecord>, Error> {
        self.shared.inbox()?.inbox_get(id).await
    }

    async fn take_back(&self, id: &str) -> Result<bool, Error> {
        self.shared.inbox()?.inbox_claim(id, RELEASED, &self.shared.owner).await
    }

    async fn still_ours(&self, key: &ChatKey, id: &str) -> bool {
        let shared = &self.shared;
        match async { shared.inbox()?.inbox_get(id).await }.await {
            Ok(Some(r)) if r.state == InboxState::Pending && r.owner == RELEASED => {
                match self.take_back(id).await {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.report(key, e.into());
                        true
                    }
                }
            }
            Ok(Some(r)) => r.state == InboxState::Pending && r.owner == shared.owner,
            Ok(None) => false,
            Err(e) => {
                self.report(key, e.into());
                true
            }
        }
    }

    async fn claim(&self, record: &InboxRecord) -> Claim {
        durable::claim(&self.shared, record).await
    }

    /// Queued, not awaited (see `acks.rs`).
    async fn acknowledge(&self, key: &ChatKey, id: String) {
        self.acknowledged(&id);
        self.acks.push(&self.shared, key, id);
    }

    fn rides_releases(&self) -> bool {
        self.shared.journaled_turns
    }

    /// Forgets how often the message failed here.
    fn acknowledged(&self, id: &str) {
        let mut failures = lock(&self.failures);
        if !failures.is_empty() {
            failures.remove(id);
        }
    }

    async fn release(&self, key: &ChatKey, id: &str, from: &str) {
        durable::release(&self.shared, key, id, from).await;
    }

    async fn give_back(&self, key: &ChatKey, message: &MessageId, id: &str, failed: bool) {
        let max = self.shared.durability.as_ref().map_or(1, |d| d.max_attempts);
        let failures = if failed {
            let mut failures = lock(&self.failures);
            let n = failures.entry(id.to_owned()).or_insert(0);
            *n += 1;
            *n
        } else {
            0
        };
        if failures < max {
            return durable::release(&self.shared, key, id, &self.shared.owner).await;
        }
        lock(&self.failures).remove(id);
        self.report(key, BotError::GaveUp { key: key.clone(), id: message.clone(), attempts: max });
        self.acks.push(&self.shared, key, id.to_owned());
    }

    fn report(&self, key: &ChatKey, error: BotError) {
        self.shared.events.error(Some(key), error);
    }

    fn emit(&self, event: Event) {
        self.shared.events.emit(event);
    }
}

impl Dispatcher {
    /// This dispatcher as the journal of a turn.
    pub(super) fn journal(self: &Arc<Self>) -> Option<Arc<dyn Journal>> {
        self.shared.durability.is_some().then(|| Arc::clone(self) as Arc<dyn Journal>)
    }
}
