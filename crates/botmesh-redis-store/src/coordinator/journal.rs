//! The journal written with the turns: a coordinator made by a [`RedisStore`] in the
//! standalone layout journals a chat's messages in the script call that takes their tickets,
//! and acknowledges a message in the call that gives its turn back (see `turns.lua`).

use std::time::Duration;

use botmesh_traits::{
    ChatKey, Error, InboxRecord, InboxState, JournaledTicket, ReleaseOptions, Result, TurnGrant,
    TurnJournal, async_trait,
};

use super::RedisCoordinator;
use super::batch::Op;
use crate::conn::ms;
use crate::parts::Parts;

#[async_trait]
impl TurnJournal for RedisCoordinator {
    fn place(&self) -> &str {
        self.journal.as_ref().map_or("", |store| &store.place)
    }

    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>> {
        let Some(first) = records.first() else { return Ok(Vec::new()) };
        if self.journal.is_none() || records.iter().any(|r| r.owner != first.owner) {
            return Err(Error::Unsupported { op: "take_tickets_journaling" });
        }
        let tid = uuid::Uuid::new_v4().simple().to_string();
        let op = Op::Journal {
            key: key.clone(),
            tid: tid.clone(),
            owner: first.owner.clone(),
            retain_ms: ms(retain),
            records: records.iter().map(|r| Parts::new([&r.id, &r.payload])).collect(),
        };
        // What a lost reply journaled is this incarnation's, found again by the next append.
        let reply = self.take(op, key, tid, "journaling and taking tickets").await?;
        let corrupt = || Error::corrupt("take_tickets_journaling reply", format!("{reply:?}"));
        let looked = reply.first().and_then(|n| n.parse::<usize>().ok()).ok_or_else(corrupt)?;
        let states =
            reply.get(1..=looked).filter(|_| looked <= records.len()).ok_or_else(corrupt)?;
        let fresh = states.iter().filter(|s| *s == "new").count();
        let mut tickets = match fresh {
            0 => Vec::new(),
            n => self.tickets(key, n, reply.get(looked + 1..).unwrap_or_default())?,
        }
        .into_iter();
        states
            .iter()
            .map(|state| match state.as_str() {
                "new" => tickets.next().map(JournaledTicket::Appended).ok_or_else(corrupt),
                "acked" => Ok(JournaledTicket::Duplicate { state: InboxState::Acked }),
                _ => Ok(JournaledTicket::Duplicate { state: InboxState::Pending }),
            })
            .collect()
    }

    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> Result<Option<bool>> {
        // A turn that passes to our next ticket here costs no call: the acknowledgement goes
        // to the store, in a batch of its own, while the next message runs.
        if self.journal.is_none() || self.runs.would_pass(grant, options, self.lease) {
            return Ok(None);
        }
        self.release(grant, options, Some(id)).await.map(Some)
    }
}
