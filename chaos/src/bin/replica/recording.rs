//! The replica's store and coordinator, wrapped to write down in its history every checkpoint
//! write that lands and every turn granted and given back, with the moment.

use std::sync::Arc;
use std::time::Duration;

use botmesh_chaos::record::{History, Record, chat_of_key, now_ns};
use botmesh_core::Error;
use botmesh_core::traits::{
    CasOutcome, CasStore, ChatId, ChatKey, ChatRecord, CheckpointRecord, CheckpointWrite,
    Coordinator, FencedLock, InboxAppend, InboxRecord, JournalStore, JournaledTicket, Leadership,
    LeaseGrant, LeaseStore, LockStore, ReleaseOptions, Store, TaskStore, Ticket, TurnGrant,
    TurnJournal, async_trait,
};
use botmesh_redis_store::{RedisCoordinator, RedisStore};

/// The real store, with every checkpoint write that lands written down in the history.
pub(crate) struct Recorded {
    pub(crate) inner: Arc<RedisStore>,
    pub(crate) history: Arc<History>,
    pub(crate) replica: String,
}

impl Recorded {
    fn landed(&self, key: &str, revision: u64, t: u64) {
        if let Some(chat) = chat_of_key(key) {
            self.history.write(&Record::Checkpoint {
                chat,
                replica: self.replica.clone(),
                revision,
                t,
            });
        }
    }
}

#[async_trait]
impl Store for Recorded {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn cas(&self) -> Option<&dyn CasStore> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn LockStore> {
        Some(self)
    }

    fn leases(&self) -> Option<&dyn LeaseStore> {
        Some(self)
    }

    fn tasks(&self) -> Option<&dyn TaskStore> {
        Some(self)
    }

    fn journal(&self) -> Option<&dyn JournalStore> {
        Some(self)
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> botmesh_core::traits::Result<()> {
        self.inner.upsert_chat(chat).await
    }

    async fn get_chat(&self, id: &ChatId) -> botmesh_core::traits::Result<Option<ChatRecord>> {
        self.inner.get_chat(id).await
    }

    async fn get_user_data(&self, key: &str) -> botmesh_core::traits::Result<Option<String>> {
        self.inner.get_user_data(key).await
    }

    async fn set_user_data(&self, key: &str, data: &str) -> botmesh_core::traits::Result<()> {
        self.inner.set_user_data(key, data).await
    }

    async fn get_checkpoint(
        &self,
        key: &str,
    ) -> botmesh_core::traits::Result<Option<CheckpointRecord>> {
        self.inner.get_checkpoint(key).await
    }

    async fn set_checkpoint(
        &self,
        key: &str,
        write: &CheckpointWrite,
    ) -> botmesh_core::traits::Result<u64> {
        self.inner.set_checkpoint(key, write).await
    }

    async fn clear_checkpoint(&self, key: &str) -> botmesh_core::traits::Result<()> {
        self.inner.clear_checkpoint(key).await
    }
}

#[async_trait]
impl CasStore for Recorded {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> botmesh_core::traits::Result<CasOutcome> {
        let t = now_ns();
        let outcome = self.inner.set_checkpoint_if(key, write, expected).await?;
        if let CasOutcome::Written { revision } = outcome {
            self.landed(key, revision, t);
        }
        Ok(outcome)
    }

    async fn clear_checkpoint_if(
        &self,
        key: &str,
        expected: u64,
    ) -> botmesh_core::traits::Result<bool> {
        let t = now_ns();
        let cleared = self.inner.clear_checkpoint_if(key, expected).await?;
        if cleared {
            self.landed(key, 0, t);
        }
        Ok(cleared)
    }
}

#[async_trait]
impl LockStore for Recorded {
    async fn acquire_lock_fenced(
        &self,
        key: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<Option<FencedLock>> {
        self.inner.acquire_lock_fenced(key, ttl).await
    }

    async fn renew_lock(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.renew_lock(key, token, ttl).await
    }

    async fn release_lock(&self, key: &str, token: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.release_lock(key, token).await
    }
}

#[async_trait]
impl LeaseStore for Recorded {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<Option<LeaseGrant>> {
        self.inner.acquire_lease(name, holder, ttl).await
    }

    async fn renew_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.renew_lease(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.release_lease(name, holder).await
    }
}

#[async_trait]
impl TaskStore for Recorded {
    async fn task_last(&self, id: &str) -> botmesh_core::traits::Result<Option<u64>> {
        self.inner.task_last(id).await
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> botmesh_core::traits::Result<bool> {
        self.inner.task_claim(id, occurrence).await
    }
}

#[async_trait]
impl JournalStore for Recorded {
    fn place(&self) -> Option<&str> {
        self.inner.place()
    }

    async fn inbox_append(
        &self,
        record: &InboxRecord,
        retain: Duration,
    ) -> botmesh_core::traits::Result<InboxAppend> {
        self.inner.inbox_append(record, retain).await
    }

    async fn inbox_ack(&self, id: &str) -> botmesh_core::traits::Result<()> {
        self.inner.inbox_ack(id).await
    }

    async fn inbox_get(&self, id: &str) -> botmesh_core::traits::Result<Option<InboxRecord>> {
        self.inner.inbox_get(id).await
    }

    async fn inbox_pending(&self, limit: usize) -> botmesh_core::traits::Result<Vec<InboxRecord>> {
        self.inner.inbox_pending(limit).await
    }

    async fn inbox_pending_for(
        &self,
        key: &ChatKey,
        limit: usize,
    ) -> botmesh_core::traits::Result<Vec<InboxRecord>> {
        self.inner.inbox_pending_for(key, limit).await
    }

    async fn inbox_claim(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> botmesh_core::traits::Result<bool> {
        self.inner.inbox_claim(id, from, to).await
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> botmesh_core::traits::Result<()> {
        self.inner.outbox_mark(key, ttl).await
    }

    async fn outbox_marked(&self, key: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.outbox_marked(key).await
    }
}

/// The real coordinator's journal, its grants and releases written down as the coordinator's.
#[async_trait]
impl TurnJournal for Granted {
    fn place(&self) -> &str {
        self.inner.turn_journal().map_or("", TurnJournal::place)
    }
    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> botmesh_core::traits::Result<Vec<JournaledTicket>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: "journal" })?;
        let answers = journal.take_tickets_journaling(key, records, retain).await?;
        self.took(
            key,
            answers.iter().filter_map(|a| match a {
                JournaledTicket::Appended(ticket) => Some(ticket),
                _ => None,
            }),
        );
        Ok(answers)
    }
    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> botmesh_core::traits::Result<Option<bool>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: "journal" })?;
        // Written before the call, as any release is: the next grant may come before its
        // answer. One that does nothing (`None`) is released again, and written again.
        self.released(grant, options);
        journal.release_turn_acknowledging(grant, options, id).await
    }
}

/// The real coordinator, with every turn it is granted written down in the history.
pub(crate) struct Granted {
    pub(crate) inner: RedisCoordinator,
    pub(crate) history: Arc<History>,
    pub(crate) replica: String,
}

impl Granted {
    /// Writes down a ticket call's `tickets` as soon as it returns, before the bot answers the
    /// senders (the moment each message it ticketed was as good as taken), then the grants
    /// among them.
    fn took<'t>(&self, key: &ChatKey, tickets: impl Iterator<Item = &'t Ticket> + Clone) {
        let count = tickets.clone().count();
        if let Some(chat) = chat_of_key(key.as_str()).filter(|_| count > 0) {
            self.history.write(&Record::Ticketed {
                chat,
                replica: self.replica.clone(),
                count,
                t: now_ns(),
            });
        }
        for grant in tickets.filter_map(|t| t.grant.as_ref()) {
            self.granted(grant);
        }
    }

    fn granted(&self, grant: &TurnGrant) {
        if let Some(chat) = chat_of_key(grant.key.as_str()) {
            self.history.write(&Record::Grant {
                chat,
                replica: self.replica.clone(),
                fence: grant.fence,
                passed: grant.passed_over.clone(),
                t: now_ns(),
            });
        }
    }

    fn released(&self, grant: &TurnGrant, options: &ReleaseOptions) {
        if let Some(chat) = chat_of_key(grant.key.as_str()) {
            self.history.write(&Record::Released {
                chat,
                replica: self.replica.clone(),
                fence: grant.fence,
                used: options.used,
                hand_back: options.hand_back,
                t: now_ns(),
            });
        }
    }
}

#[async_trait]
impl Coordinator for Granted {
    fn replica_id(&self) -> &str {
        self.inner.replica_id()
    }
    fn incarnation(&self) -> &str {
        self.inner.incarnation()
    }
    fn lease(&self) -> Duration {
        self.inner.lease()
    }
    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        self.inner.turn_journal().map(|_| self as &dyn TurnJournal)
    }
    async fn take_ticket(&self, key: &ChatKey) -> botmesh_core::traits::Result<Ticket> {
        let ticket = self.inner.take_ticket(key).await?;
        self.took(key, std::iter::once(&ticket));
        Ok(ticket)
    }
    async fn take_tickets(
        &self,
        key: &ChatKey,
        count: usize,
    ) -> botmesh_core::traits::Result<Vec<Ticket>> {
        let tickets = self.inner.take_tickets(key, count).await?;
        self.took(key, tickets.iter());
        Ok(tickets)
    }
    async fn wait_turn(
        &self,
        ticket: &Ticket,
        timeout: Duration,
    ) -> botmesh_core::traits::Result<TurnGrant> {
        let grant = self.inner.wait_turn(ticket, timeout).await?;
        if ticket.grant.is_none() {
            self.granted(&grant);
        }
        Ok(grant)
    }
    async fn release_turn(&self, grant: &TurnGrant) -> botmesh_core::traits::Result<bool> {
        self.released(grant, &ReleaseOptions::used());
        self.inner.release_turn(grant).await
    }
    async fn release_turn_with(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
    ) -> botmesh_core::traits::Result<bool> {
        self.released(grant, options);
        self.inner.release_turn_with(grant, options).await
    }
    async fn cancel_ticket(&self, ticket: &Ticket) -> botmesh_core::traits::Result<()> {
        self.inner.cancel_ticket(ticket).await
    }
    async fn is_alive(&self, incarnation: &str) -> botmesh_core::traits::Result<bool> {
        self.inner.is_alive(incarnation).await
    }
    async fn heartbeat(&self, lease: Duration) -> botmesh_core::traits::Result<()> {
        self.inner.heartbeat(lease).await
    }
    async fn try_lead(
        &self,
        name: &str,
        lease: Duration,
    ) -> botmesh_core::traits::Result<Option<Leadership>> {
        self.inner.try_lead(name, lease).await
    }
    async fn resign(&self, leadership: &Leadership) -> botmesh_core::traits::Result<bool> {
        self.inner.resign(leadership).await
    }
}
