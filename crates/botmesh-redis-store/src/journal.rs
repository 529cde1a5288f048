//! The journal on Redis: an inbox of records (a hash each) indexed by a sorted set of the
//! pending ones, all under one hash tag in the cluster layout. Appends and acknowledgements of
//! many chats go in batches (see `inbox.rs`).

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    Error, InboxAppend, InboxRecord, InboxState, JournalStore, Result, async_trait,
};
use redis::AsyncCommands;

use crate::KeyLayout;
use crate::batch::{Batch, Batcher, MAX_BATCH};
use crate::call::ScriptCall;
use crate::conn::{idempotent, ms};
use crate::inbox::{Append, Inbox, Op};
use crate::replicas;
use crate::scripts;
use crate::store::RedisStore;

impl RedisStore {
    /// The batcher of this store's journal writes.
    fn inbox(&self) -> &Batcher<Inbox> {
        self.journal.get_or_init(|| {
            Batcher::new(Inbox {
                conn: self.conn(),
                keys: self.keys.clone(),
                script: scripts::INBOX_BATCH.get(),
                replicas: self.options.replicas,
            })
        })
    }

    /// Runs `op` in the next batch of journal writes.
    async fn batched(&self, op: Op) -> std::result::Result<Vec<String>, Arc<redis::RedisError>> {
        self.inbox().call(op).await
    }
}

#[async_trait]
impl JournalStore for RedisStore {
    /// This store's, in the standalone layout: its coordinators write it with their tickets
    /// and releases (see [`RedisStore::coordinator`]). In the cluster layout the journal lives
    /// under a hash tag of its own, which a chat's coordination script cannot reach.
    fn place(&self) -> Option<&str> {
        (self.keys.layout() == KeyLayout::Standalone).then_some(&*self.place)
    }

    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        let state = match record.state {
            InboxState::Acked => "acked",
            _ => "pending",
        };
        let fields = [&*record.id, record.key.as_str(), &record.payload, &record.owner];
        let op = Op::Append(Append::new(fields, state, ms(retain)));
        let reply = self.batched(op).await.map_err(|e| replicas::store_error("inbox_append", e))?;
        Ok(match reply.first().map(String::as_str) {
            Some("new") => InboxAppend::Appended,
            Some("acked") => InboxAppend::Duplicate { state: InboxState::Acked },
            Some(_) => InboxAppend::Duplicate { state: InboxState::Pending },
            None => return Err(Error::corrupt("inbox_append reply", "empty")),
        })
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        self.batched(Op::Ack { id: id.to_owned() })
            .await
            .map_err(|e| replicas::store_error("inbox_ack", e))?;
        Ok(())
    }

    /// One script call per [`MAX_BATCH`] acknowledgements, sent as they are: the runtime
    /// batched them already.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        for chunk in ids.chunks(MAX_BATCH) {
            let ops = chunk.iter().map(|id| Op::Ack { id: id.clone() }).collect();
            for reply in self.inbox().sender().send(ops).await {
                reply.map_err(|e| replicas::store_error("inbox_ack_batch", e))?;
            }
        }
        Ok(())
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let record = self.keys.inbox(&format!("r:{id}"));
        let fields: Vec<Option<String>> =
            self.hmget("inbox_get", &record, &["k", "p", "o", "s"]).await?;
        let [Some(key), Some(payload), Some(owner), Some(state)] =
            <[Option<String>; 4]>::try_from(fields).map_err(|_| {
                Error::corrupt(
                    format!("inbox record {id}"),
                    "HMGET returned the wrong number of fields",
                )
            })?
        else {
            return Ok(None);
        };
        let state = if state == "acked" { InboxState::Acked } else { InboxState::Pending };
        Ok(Some(InboxRecord::pending(id, key, payload, owner).with_state(state)))
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (pending, records) = (&self.keys.inbox("pending"), &self.keys.inbox("r:"));
        let flat: Vec<String> = idempotent(|| async move {
            scripts::INBOX_PENDING
                .get()
                .key(pending)
                .arg(limit)
                .arg(records)
                .invoke_async(&mut self.conn())
                .await
        })
        .await
        .map_err(|e| Error::store("inbox_pending", e))?;
        Ok(flat
            .chunks_exact(4)
            .map(|c| InboxRecord::pending(c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()))
            .collect())
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let record = &self.keys.inbox(&format!("r:{id}"));
        let mut call = ScriptCall::new(scripts::INBOX_CLAIM.get(), 1, 3, record.len() + 64);
        call.arg(record).arg(from).arg(to);
        let call = &call;
        let send = || async move {
            replicas::script::<i64>(call, &mut self.conn(), self.options.replicas).await
        };
        let n = match send().await {
            Ok(n) => n,
            Err(e) if e.is_connection_dropped() => {
                // The claim may have landed before the connection dropped: a pending record
                // that is `to`'s now is this claim's doing. Otherwise it goes again.
                match self.inbox_get(id).await? {
                    Some(r) if r.state == InboxState::Pending && r.owner == to => return Ok(true),
                    _ => send().await.map_err(|e| replicas::store_error("inbox_claim", e))?,
                }
            }
            Err(e) => return Err(replicas::store_error("inbox_claim", e)),
        };
        Ok(n == 1)
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        let op = Op::Mark { key: key.to_owned(), ttl_ms: ms(ttl) };
        self.batched(op).await.map(drop).map_err(|e| replicas::store_error("outbox_mark", e))
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        let key = &self.keys.outbox(key);
        idempotent(|| async move { self.conn().exists::<_, bool>(key).await })
            .await
            .map_err(|e| Error::store("outbox_marked", e))
    }
}
