//! Durability: the inbox journal written on arrival, acknowledgements, and the replay of what
//! a dead replica journaled and never handled.

use std::collections::HashMap;
use std::sync::Arc;

use botmesh_traits::{Error, Inbound, InboxAppend, InboxRecord};
use futures_util::future::join_all;

use crate::bot::Shared;
use crate::dispatcher::Dispatcher;
use crate::{BotError, Event};

/// The journal's dedupe id of an inbound message: its provider and its id.
pub(crate) fn journal_id(inbound: &Inbound) -> String {
    format!("{}:{}", inbound.provider, inbound.id)
}

/// What journaling said about one message.
pub(crate) enum Journaled {
    /// Journaled now, under this id.
    New(String),
    /// Already journaled (a retry of a message this or another replica has).
    Duplicate,
    /// The journal could not be written: the message is handled without it.
    Failed,
}

/// Journals messages that arrived together, in one concurrent batch of appends.
pub(crate) async fn journal<'a>(
    shared: &Shared,
    messages: impl Iterator<Item = &'a Inbound>,
) -> Vec<Journaled> {
    let Some(durability) = &shared.durability else { return Vec::new() };
    let appends = messages.map(|inbound| async move {
        let id = journal_id(inbound);
        let payload = match serde_json::to_string(inbound) {
            Ok(p) => p,
            Err(e) => return (id, Err(Error::corrupt("an inbound message", e))),
        };
        let record = InboxRecord::pending(&id, inbound.key().as_str(), payload, &shared.owner);
        let appended = shared.store.inbox_append(&record, durability.retain).await;
        (id, appended)
    });
    join_all(appends)
        .await
        .into_iter()
        .map(|(id, appended)| match appended {
            Ok(InboxAppend::Appended) => Journaled::New(id),
            Ok(_) => Journaled::Duplicate,
            Err(e) => {
                shared.events.error(None, e.into());
                Journaled::Failed
            }
        })
        .collect()
}

/// Replays, every `replay_every`, the pending messages whose owner is dead: claims each and
/// queues it on its chat here. Without a coordinator (one process), only the records left by
/// an earlier process are taken, once at start.
pub(crate) async fn replay(shared: Arc<Shared>, dispatcher: Arc<Dispatcher>) {
    const BATCH: usize = 100;
    let Some(durability) = shared.durability.clone() else { return };
    let coordinator = shared.coordination.as_ref().and_then(|c| c.coordinator());
    loop {
        let pending = match shared.store.inbox_pending(BATCH).await {
            Ok(p) => p,
            Err(e) => {
                shared.events.error(None, e.into());
                Vec::new()
            }
        };
        let mut alive: HashMap<String, bool> = HashMap::new();
        for record in pending.into_iter().filter(|r| r.owner != shared.owner) {
            let owner_alive = match (&coordinator, alive.get(&record.owner)) {
                (_, Some(known)) => *known,
                (None, None) => false,
                (Some(c), None) => match c.is_alive(&record.owner).await {
                    Ok(a) => {
                        alive.insert(record.owner.clone(), a);
                        a
                    }
                    Err(e) => {
                        shared.events.error(None, e.into());
                        break;
                    }
                },
            };
            if owner_alive {
                continue;
            }
            match shared.store.inbox_claim(&record.id, &record.owner, &shared.owner).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    shared.events.error(None, e.into());
                    continue;
                }
            }
            match serde_json::from_str::<Inbound>(&record.payload) {
                Ok(inbound) => {
                    shared.events.emit(Event::Replayed {
                        key: inbound.key(),
                        id: inbound.id.clone(),
                        from: record.owner.clone(),
                    });
                    dispatcher.requeue(inbound, record.id, 0);
                }
                Err(e) => {
                    let source = Error::corrupt(format!("journaled message {}", record.id), e);
                    shared.events.error(None, BotError::from(source));
                    if let Err(e) = shared.store.inbox_ack(&record.id).await {
                        shared.events.error(None, e.into());
                    }
                }
            }
        }
        if coordinator.is_none() {
            return;
        }
        tokio::time::sleep(durability.replay_every).await;
    }
}
