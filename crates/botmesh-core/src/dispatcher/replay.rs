//! The periodic replay of the inbox journal: what dead replicas journaled and never handled
//! (or released unfinished) is queued here as a takeover of its chat.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use botmesh_traits::{ChatKey, InboxRecord};

use super::Dispatcher;
use crate::coordination::Claim;
use crate::durable;
use crate::shared::Shared;

/// Every `replay_every`, finds the pending messages whose owner is dead (or that a replica
/// released unfinished) and queues a takeover of each such chat here: under the chat's turn,
/// the worker claims and handles them in journal order. An owner must have been found dead on
/// the pass before too: meanwhile the next holder of each of its chats takes them over
/// anyway, and only chats nobody writes to are left to this loop. Without coordination (one
/// process), the records left by an earlier process are claimed and queued again, once at
/// start. Under coordination, what came through an exclusive transport is left to the replica
/// that runs it.
pub(crate) async fn replay(shared: Arc<Shared>, dispatcher: Arc<Dispatcher>) {
    const BATCH: usize = 100;
    let Some(durability) = shared.durability.clone() else { return };
    let coordination = shared.coordination.clone();
    let mut suspects: HashSet<String> = HashSet::new();
    loop {
        let pending = match async { shared.inbox()?.inbox_pending(BATCH).await }.await {
            Ok(p) => p,
            Err(e) => {
                shared.events.error(None, e.into());
                Vec::new()
            }
        };
        let mut alive: HashMap<String, bool> = HashMap::new();
        let mut dead_now: HashSet<String> = HashSet::new();
        // Under coordination, chats to take over under their turn, with the dead owners.
        let mut chats: HashMap<ChatKey, Vec<String>> = HashMap::new();
        // A message of an exclusive transport that another replica runs is left to that one:
        // here its handler would run, and its reply fail, for nothing.
        let ours = |r: &InboxRecord| {
            r.owner != shared.owner
                && !(coordination.is_some() && shared.providers.led_elsewhere(&r.id))
        };
        for record in pending.into_iter().filter(ours) {
            let owner_alive = match (&coordination, alive.get(&record.owner)) {
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
            if coordination.is_some() {
                dead_now.insert(record.owner.clone());
                if suspects.contains(&record.owner) {
                    let owners = chats.entry(record.key.clone()).or_default();
                    if !owners.contains(&record.owner) {
                        owners.push(record.owner.clone());
                    }
                }
                continue;
            }
            // One process: the records an earlier process left, queued again at start.
            if let Claim::Claimed(taken) = durable::claim(&shared, &record).await {
                dispatcher.requeue(taken, record.id);
            }
        }
        for (key, owners) in chats {
            dispatcher.take_over(&key, owners);
        }
        if coordination.is_none() {
            return;
        }
        suspects = dead_now;
        tokio::time::sleep(durability.replay_every).await;
    }
}
