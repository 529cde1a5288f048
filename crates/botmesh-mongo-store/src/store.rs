//! [`MongoStore`].
//!
//! Kept whole: `impl Store for MongoStore` and its capability traits, every method of the
//! contract in the contract's order; the schema (`schema.rs`) and the duplicate-key writes (`write.rs`)
//! already live beside it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use botmesh_traits::{
    BoxError, CasOutcome, CasStore, ChatId, ChatRecord, CheckpointRecord, CheckpointWrite, Error,
    FencedLock, InboxAppend, InboxRecord, InboxState, JournalStore, LeaseGrant, LeaseStore,
    LockStore, Result, Store, TaskStore, async_trait,
};
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::options::{ClientOptions, ReturnDocument};
use mongodb::{Client, Collection, Database};

use crate::clock::{RESAMPLE_EVERY, ServerClock};
use crate::options::{DEFAULT_DATABASE, MongoOptions};
use crate::schema;
use crate::write::{is_duplicate, upsert};

/// The `_id` of the counter that orders the inbox journal.
const INBOX_SEQ: &str = "inbox_seq";

fn db(op: &'static str) -> impl FnOnce(mongodb::error::Error) -> Error {
    move |e| Error::store(op, e)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A whole-number field, as MongoDB or another driver may have typed it.
fn int(doc: &Document, field: &str) -> Option<i64> {
    match doc.get(field)? {
        Bson::Int64(v) => Some(*v),
        Bson::Int32(v) => Some(i64::from(*v)),
        _ => None,
    }
}

fn text(doc: &Document, field: &str) -> Option<String> {
    match doc.get(field)? {
        Bson::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn corrupt(what: &str, field: &str) -> Error {
    Error::corrupt(
        format!("MongoDB {what} document"),
        format!("field {field} is missing or mistyped"),
    )
}

fn required_int(doc: &Document, what: &str, field: &str) -> Result<u64> {
    let v = int(doc, field).ok_or_else(|| corrupt(what, field))?;
    Ok(u64::try_from(v).unwrap_or(0))
}

fn required_text(doc: &Document, what: &str, field: &str) -> Result<String> {
    text(doc, field).ok_or_else(|| corrupt(what, field))
}

/// No server answered the first command.
#[derive(Debug, thiserror::Error)]
#[error("no MongoDB server answered at {hosts} within {timeout:?}")]
struct Unreachable {
    hosts: String,
    timeout: Duration,
    #[source]
    source: mongodb::error::Error,
}

/// The store's collections, named with the configured prefix.
#[derive(Debug)]
struct Inner {
    client: Client,
    database: Database,
    chats: Collection<Document>,
    users: Collection<Document>,
    checkpoints: Collection<Document>,
    locks: Collection<Document>,
    leases: Collection<Document>,
    inbox: Collection<Document>,
    outbox: Collection<Document>,
    /// The last claimed occurrence of each durable task.
    tasks: Collection<Document>,
    meta: Collection<Document>,
    prefix: String,
    clock: ServerClock,
}

/// A [`Store`] on MongoDB.
///
/// Cheap to clone: clones share the driver's connection pool.
#[derive(Debug, Clone)]
pub struct MongoStore {
    inner: Arc<Inner>,
}

impl MongoStore {
    /// Connects to `url` with the default options.
    pub async fn new(url: &str) -> Result<Self> {
        Self::connect(MongoOptions::new(url)).await
    }

    /// Connects, checks that a server answers, reads the server's clock, and creates the
    /// indexes unless told not to.
    ///
    /// # Errors
    ///
    /// [`Error::Configuration`] for a URL the driver cannot parse or a database whose schema
    /// was written by a newer version of this crate; [`Error::Store`] (operation `connect`)
    /// when no server answers within the server selection timeout.
    pub async fn connect(options: MongoOptions) -> Result<Self> {
        let mut client_options = ClientOptions::parse(&options.url).await.map_err(|e| {
            Error::Configuration(BoxError::from(format!("invalid MongoDB URL: {e}")))
        })?;
        client_options.max_pool_size =
            options.max_pool_size.or(client_options.max_pool_size).or(Some(10));
        client_options.min_pool_size = options.min_pool_size.or(client_options.min_pool_size);
        client_options.connect_timeout = options
            .connect_timeout
            .or(client_options.connect_timeout)
            .or(Some(Duration::from_secs(5)));
        client_options.server_selection_timeout = options
            .server_selection_timeout
            .or(client_options.server_selection_timeout)
            .or(Some(Duration::from_secs(5)));
        if options.app_name.is_some() {
            client_options.app_name.clone_from(&options.app_name);
        }
        let name = options
            .database
            .clone()
            .or_else(|| client_options.default_database.clone())
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        let hosts = client_options.hosts.iter().map(ToString::to_string).collect::<Vec<_>>();
        let timeout = client_options.server_selection_timeout.unwrap_or_default();
        let client = Client::with_options(client_options).map_err(|e| {
            Error::Configuration(BoxError::from(format!("invalid MongoDB options: {e}")))
        })?;
        let store = Self::with_client(client, &name, &options.collection_prefix);
        store.inner.clock.sample(&store.inner.database).await.map_err(|source| {
            Error::store("connect", Unreachable { hosts: hosts.join(","), timeout, source })
        })?;
        if options.migrate {
            store.migrate().await?;
        } else {
            schema::check(&store.inner.meta).await?;
        }
        store.keep_clock();
        Ok(store)
    }

    fn with_client(client: Client, database: &str, prefix: &str) -> Self {
        let database = client.database(database);
        let coll = |name: &str| database.collection::<Document>(&format!("{prefix}{name}"));
        let inner = Inner {
            chats: coll("chats"),
            users: coll("users"),
            checkpoints: coll("checkpoints"),
            locks: coll("locks"),
            leases: coll("leases"),
            inbox: coll("inbox"),
            outbox: coll("outbox"),
            tasks: coll("tasks"),
            meta: coll("meta"),
            prefix: prefix.to_owned(),
            clock: ServerClock::default(),
            database,
            client,
        };
        Self { inner: Arc::new(inner) }
    }

    /// Measures the server's clock again every minute while the store is alive.
    fn keep_clock(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(RESAMPLE_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { break };
                // A failed sample keeps the last offset; the next operation reports the fault.
                let _ = inner.clock.sample(&inner.database).await;
            }
        });
    }

    /// The driver's client, for code that shares its pool.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The database the store uses.
    pub fn database(&self) -> &Database {
        &self.inner.database
    }

    /// The prefix of the store's collection names.
    pub fn collection_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Creates the indexes of the schema versions not recorded yet and records the newest.
    ///
    /// Safe from several replicas at once: creating an index that exists with the same
    /// options does nothing, and the recorded version only ever grows (`$max`).
    pub async fn migrate(&self) -> Result<()> {
        schema::migrate(&self.inner.database, &self.inner.meta, &self.inner.prefix).await
    }

    fn now(&self) -> DateTime {
        self.inner.clock.now()
    }

    fn after(&self, ttl: Duration) -> DateTime {
        self.inner.clock.after(ttl)
    }

    /// The filter of a checkpoint that exists and has not expired.
    fn live(&self) -> Document {
        doc! {
            "data": { "$ne": Bson::Null },
            "$or": [ { "expires_at": Bson::Null }, { "expires_at": { "$gt": self.now() } } ],
        }
    }

    fn expiry(&self, write: &CheckpointWrite) -> Bson {
        write.ttl.map_or(Bson::Null, |ttl| Bson::DateTime(self.after(ttl)))
    }

    async fn current_revision(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.get_checkpoint(key).await?.map(|c| c.revision))
    }

    /// The next number of the inbox order, counted by the database.
    async fn next_inbox_seq(&self) -> Result<i64> {
        let counter = self
            .inner
            .meta
            .find_one_and_update(doc! { "_id": INBOX_SEQ }, doc! { "$inc": { "value": 1_i64 } })
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await
            .map_err(db("inbox_append"))?;
        counter.as_ref().and_then(|c| int(c, "value")).ok_or_else(|| corrupt("counter", "value"))
    }

    fn inbox_doc(&self, record: &InboxRecord, retain: Duration, seq: i64) -> Document {
        let acked = record.state == InboxState::Acked;
        let (acked_at, forget_at) = if acked {
            (Bson::DateTime(self.now()), Bson::DateTime(self.after(retain)))
        } else {
            (Bson::Null, Bson::Null)
        };
        doc! {
            "_id": &record.id,
            "key": record.key.as_str(),
            "payload": &record.payload,
            "owner": &record.owner,
            "state": if acked { "acked" } else { "pending" },
            "seq": seq,
            "retain_ms": i64::try_from(retain.as_millis()).unwrap_or(i64::MAX),
            "acked_at": acked_at,
            "forget_at": forget_at,
        }
    }

    /// Gives the lock or lease `id` to `owner` (stored in `field`) for `ttl` if it is free or
    /// expired, as one `findAndModify` that also grows its fence, and returns the fence.
    /// `None` when someone else holds it: the filter does not match, and the upsert's insert
    /// of an existing `_id` is refused.
    async fn take(
        &self,
        coll: &Collection<Document>,
        id: &str,
        field: &str,
        owner: &str,
        ttl: Duration,
        op: &'static str,
    ) -> Result<Option<u64>> {
        let granted = coll
            .find_one_and_update(
                doc! {
                    "_id": id,
                    "$or": [ { field: Bson::Null }, { "expires_at": { "$lte": self.now() } } ],
                },
                doc! {
                    "$set": { field: owner, "expires_at": self.after(ttl) },
                    "$inc": { "fence": 1_i64 },
                },
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await;
        match granted {
            Ok(Some(d)) => Ok(Some(required_int(&d, "lock or lease", "fence")?)),
            Ok(None) => Ok(None),
            Err(e) if is_duplicate(&e) => Ok(None),
            Err(e) => Err(Error::store(op, e)),
        }
    }

    /// Applies `update` to the lock or lease `id` if `owner` (`(field, value)`) still holds it
    /// and it has not expired; returns whether it did.
    async fn update_held(
        &self,
        coll: &Collection<Document>,
        id: &str,
        (field, owner): (&str, &str),
        update: Document,
        op: &'static str,
    ) -> Result<bool> {
        let filter = doc! { "_id": id, field: owner, "expires_at": { "$gt": self.now() } };
        let done = coll.update_one(filter, update).await.map_err(db(op))?;
        Ok(done.matched_count == 1)
    }

    /// The `acked_at` of an acknowledged inbox document whose retention is over: the journal
    /// has forgotten it, even if the TTL monitor has not removed it yet.
    fn forgettable(&self, d: &Document) -> Option<DateTime> {
        let Some(Bson::DateTime(acked_at)) = d.get("acked_at") else { return None };
        let retained = int(d, "retain_ms").unwrap_or(0);
        let over =
            acked_at.timestamp_millis().saturating_add(retained) <= self.now().timestamp_millis();
        over.then_some(*acked_at)
    }

    /// `record`'s id is already journaled: forgets the old record if its retention is over
    /// (one conditional replace, so two replicas cannot both take it over), else reports it.
    async fn inbox_existing(
        &self,
        record: &InboxRecord,
        retain: Duration,
        seq: i64,
    ) -> Result<InboxAppend> {
        let op = "inbox_append";
        let Some(old) =
            self.inner.inbox.find_one(doc! { "_id": &record.id }).await.map_err(db(op))?
        else {
            // Removed by the TTL monitor in between: the id is free again.
            return match self.inner.inbox.insert_one(self.inbox_doc(record, retain, seq)).await {
                Ok(_) => Ok(InboxAppend::Appended),
                Err(e) if is_duplicate(&e) => {
                    Ok(InboxAppend::Duplicate { state: InboxState::Pending })
                }
                Err(e) => Err(Error::store(op, e)),
            };
        };
        let acked = text(&old, "state").as_deref() == Some("acked");
        if !acked {
            return Ok(InboxAppend::Duplicate { state: InboxState::Pending });
        }
        let Some(acked_at) = self.forgettable(&old) else {
            return Ok(InboxAppend::Duplicate { state: InboxState::Acked });
        };
        let replaced = self
            .inner
            .inbox
            .find_one_and_replace(
                doc! { "_id": &record.id, "state": "acked", "acked_at": acked_at },
                self.inbox_doc(record, retain, seq),
            )
            .await
            .map_err(db(op))?;
        if replaced.is_some() {
            return Ok(InboxAppend::Appended);
        }
        let now = self.inner.inbox.find_one(doc! { "_id": &record.id }).await.map_err(db(op))?;
        let state = match now.as_ref().and_then(|d| text(d, "state")).as_deref() {
            Some("acked") => InboxState::Acked,
            _ => InboxState::Pending,
        };
        Ok(InboxAppend::Duplicate { state })
    }
}

#[async_trait]
impl Store for MongoStore {
    fn shared(&self) -> bool {
        true
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

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<()> {
        let mut set = doc! { "provider": &chat.provider };
        if let Some(lang) = &chat.lang {
            set.insert("lang", lang);
        }
        let update = doc! {
            "$set": set,
            "$setOnInsert": { "first_seen_ms": to_i64(chat.first_seen_ms) },
            "$max": { "last_seen_ms": to_i64(chat.last_seen_ms) },
        };
        upsert(&self.inner.chats, doc! { "_id": chat.id.as_str() }, update)
            .await
            .map_err(db("upsert_chat"))
    }

    async fn get_chat(&self, id: &ChatId) -> Result<Option<ChatRecord>> {
        let found =
            self.inner.chats.find_one(doc! { "_id": id.as_str() }).await.map_err(db("get_chat"))?;
        let Some(d) = found else { return Ok(None) };
        let provider = required_text(&d, "chat", "provider")?;
        let mut chat =
            ChatRecord::new(id.clone(), provider, required_int(&d, "chat", "first_seen_ms")?);
        chat.last_seen_ms = required_int(&d, "chat", "last_seen_ms")?;
        chat.lang = text(&d, "lang");
        Ok(Some(chat))
    }

    async fn get_user_data(&self, key: &str) -> Result<Option<String>> {
        let found =
            self.inner.users.find_one(doc! { "_id": key }).await.map_err(db("get_user_data"))?;
        found.map(|d| required_text(&d, "user", "data")).transpose()
    }

    async fn set_user_data(&self, key: &str, data: &str) -> Result<()> {
        let update = doc! { "$set": { "data": data } };
        upsert(&self.inner.users, doc! { "_id": key }, update).await.map_err(db("set_user_data"))
    }

    async fn get_checkpoint(&self, key: &str) -> Result<Option<CheckpointRecord>> {
        let mut filter = self.live();
        filter.insert("_id", key);
        let found = self.inner.checkpoints.find_one(filter).await.map_err(db("get_checkpoint"))?;
        found
            .map(|d| {
                Ok(CheckpointRecord::new(
                    required_text(&d, "checkpoint", "data")?,
                    required_int(&d, "checkpoint", "revision")?,
                ))
            })
            .transpose()
    }

    async fn set_checkpoint(&self, key: &str, write: &CheckpointWrite) -> Result<u64> {
        let update = doc! {
            "$set": { "data": &write.data, "expires_at": self.expiry(write) },
            "$inc": { "revision": 1_i64 },
        };
        for attempt in 0..2 {
            let written = self
                .inner
                .checkpoints
                .find_one_and_update(doc! { "_id": key }, update.clone())
                .upsert(true)
                .return_document(ReturnDocument::After)
                .await;
            match written {
                Ok(Some(d)) => return required_int(&d, "checkpoint", "revision"),
                Ok(None) => return Err(corrupt("checkpoint", "_id")),
                Err(e) if attempt == 0 && is_duplicate(&e) => {}
                Err(e) => return Err(Error::store("set_checkpoint", e)),
            }
        }
        Err(corrupt("checkpoint", "_id"))
    }

    async fn clear_checkpoint(&self, key: &str) -> Result<()> {
        // The document stays, emptied, so its revision counter never restarts.
        self.inner
            .checkpoints
            .update_one(doc! { "_id": key }, doc! { "$set": { "data": Bson::Null } })
            .await
            .map_err(db("clear_checkpoint"))?;
        Ok(())
    }
}

#[async_trait]
impl CasStore for MongoStore {
    async fn set_checkpoint_if(
        &self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome> {
        let update = doc! {
            "$set": { "data": &write.data, "expires_at": self.expiry(write) },
            "$inc": { "revision": 1_i64 },
        };
        // One findAndModify either way. Expecting a revision, the filter names it; expecting
        // nothing, the filter matches only an empty or expired document, and the upsert's
        // insert of an `_id` that exists is refused by the `_id` index when a live one is there.
        let (filter, upsert) = match expected {
            Some(rev) => {
                let mut f = self.live();
                f.insert("_id", key);
                f.insert("revision", to_i64(rev));
                (f, false)
            }
            None => (
                doc! {
                    "_id": key,
                    "$or": [ { "data": Bson::Null }, { "expires_at": { "$lte": self.now() } } ],
                },
                true,
            ),
        };
        let written = self
            .inner
            .checkpoints
            .find_one_and_update(filter, update)
            .upsert(upsert)
            .return_document(ReturnDocument::After)
            .await;
        match written {
            Ok(Some(d)) => {
                Ok(CasOutcome::Written { revision: required_int(&d, "checkpoint", "revision")? })
            }
            Ok(None) => Ok(CasOutcome::Conflict { current: self.current_revision(key).await? }),
            Err(e) if is_duplicate(&e) => {
                Ok(CasOutcome::Conflict { current: self.current_revision(key).await? })
            }
            Err(e) => Err(Error::store("set_checkpoint_if", e)),
        }
    }

    async fn clear_checkpoint_if(&self, key: &str, expected: u64) -> Result<bool> {
        let mut filter = self.live();
        filter.insert("_id", key);
        filter.insert("revision", to_i64(expected));
        let done = self
            .inner
            .checkpoints
            .update_one(filter, doc! { "$set": { "data": Bson::Null } })
            .await
            .map_err(db("clear_checkpoint_if"))?;
        Ok(done.matched_count == 1)
    }
}

#[async_trait]
impl LockStore for MongoStore {
    async fn acquire_lock_fenced(&self, key: &str, ttl: Duration) -> Result<Option<FencedLock>> {
        let token = uuid::Uuid::new_v4().to_string();
        let fence = self.take(&self.inner.locks, key, "token", &token, ttl, "acquire_lock_fenced");
        Ok(fence.await?.map(|f| FencedLock::new(token, f)))
    }

    async fn renew_lock(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        let update = doc! { "$set": { "expires_at": self.after(ttl) } };
        self.update_held(&self.inner.locks, key, ("token", token), update, "renew_lock").await
    }

    async fn release_lock(&self, key: &str, token: &str) -> Result<bool> {
        let update = doc! { "$set": { "token": Bson::Null } };
        self.update_held(&self.inner.locks, key, ("token", token), update, "release_lock").await
    }
}

#[async_trait]
impl LeaseStore for MongoStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseGrant>> {
        let op = "acquire_lease";
        // The holder renews with its fence...
        let renewed = self
            .inner
            .leases
            .find_one_and_update(
                doc! { "_id": name, "holder": holder, "expires_at": { "$gt": self.now() } },
                doc! { "$set": { "expires_at": self.after(ttl) } },
            )
            .return_document(ReturnDocument::After)
            .await
            .map_err(db(op))?;
        if let Some(d) = renewed {
            return Ok(Some(LeaseGrant::new(required_int(&d, "lease", "fence")?)));
        }
        // ...anyone else takes a free or expired lease, and the fence grows.
        let fence = self.take(&self.inner.leases, name, "holder", holder, ttl, op).await?;
        Ok(fence.map(LeaseGrant::new))
    }

    async fn renew_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let update = doc! { "$set": { "expires_at": self.after(ttl) } };
        self.update_held(&self.inner.leases, name, ("holder", holder), update, "renew_lease").await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let update = doc! { "$set": { "holder": Bson::Null } };
        self.update_held(&self.inner.leases, name, ("holder", holder), update, "release_lease")
            .await
    }
}

#[async_trait]
impl TaskStore for MongoStore {
    async fn task_last(&self, id: &str) -> Result<Option<u64>> {
        let found = self.inner.tasks.find_one(doc! { "_id": id }).await.map_err(db("task_last"))?;
        found.map(|d| required_int(&d, "task", "last")).transpose()
    }

    async fn task_claim(&self, id: &str, occurrence: u64) -> Result<bool> {
        let op = "task_claim";
        let occurrence = to_i64(occurrence);
        // A later occurrence over the document; else the first one, decided by `_id`.
        let moved = self
            .inner
            .tasks
            .update_one(
                doc! { "_id": id, "last": { "$lt": occurrence } },
                doc! { "$set": { "last": occurrence } },
            )
            .await
            .map_err(db(op))?;
        if moved.matched_count == 1 {
            return Ok(true);
        }
        match self.inner.tasks.insert_one(doc! { "_id": id, "last": occurrence }).await {
            Ok(_) => Ok(true),
            Err(e) if is_duplicate(&e) => Ok(false),
            Err(e) => Err(Error::store(op, e)),
        }
    }
}

#[async_trait]
impl JournalStore for MongoStore {
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        let seq = self.next_inbox_seq().await?;
        match self.inner.inbox.insert_one(self.inbox_doc(record, retain, seq)).await {
            Ok(_) => Ok(InboxAppend::Appended),
            Err(e) if is_duplicate(&e) => self.inbox_existing(record, retain, seq).await,
            Err(e) => Err(Error::store("inbox_append", e)),
        }
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        let op = "inbox_ack";
        let acked_at = self.now();
        let acked = self
            .inner
            .inbox
            .find_one_and_update(
                doc! { "_id": id, "state": "pending" },
                doc! { "$set": { "state": "acked", "acked_at": acked_at } },
            )
            .return_document(ReturnDocument::After)
            .await
            .map_err(db(op))?;
        // The retention runs from `acked_at`; `forget_at` only lets the TTL index remove the
        // record once it is over, so a failure between the two writes loses nothing.
        if let Some(d) = acked {
            let retain = int(&d, "retain_ms").unwrap_or(0);
            let forget_at =
                DateTime::from_millis(acked_at.timestamp_millis().saturating_add(retain));
            self.inner
                .inbox
                .update_one(
                    doc! { "_id": id, "acked_at": acked_at },
                    doc! { "$set": { "forget_at": forget_at } },
                )
                .await
                .map_err(db(op))?;
        }
        Ok(())
    }

    /// Each acknowledgement as [`inbox_ack`](JournalStore::inbox_ack) does it (its retention
    /// counts from its own acknowledgement), all at once over the driver's pool.
    async fn inbox_ack_batch(&self, ids: &[String]) -> Result<()> {
        let acked = futures_util::future::join_all(ids.iter().map(|id| self.inbox_ack(id))).await;
        acked.into_iter().collect()
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let found = self.inner.inbox.find_one(doc! { "_id": id }).await.map_err(db("inbox_get"))?;
        let Some(d) = found else { return Ok(None) };
        let record = InboxRecord::pending(
            id,
            required_text(&d, "inbox", "key")?,
            required_text(&d, "inbox", "payload")?,
            required_text(&d, "inbox", "owner")?,
        );
        if text(&d, "state").as_deref() != Some("acked") {
            return Ok(Some(record));
        }
        if self.forgettable(&d).is_some() {
            return Ok(None);
        }
        Ok(Some(record.with_state(InboxState::Acked)))
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let op = "inbox_pending";
        let mut cursor = self
            .inner
            .inbox
            .find(doc! { "state": "pending" })
            .sort(doc! { "seq": 1 })
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .await
            .map_err(db(op))?;
        let mut out = Vec::new();
        while cursor.advance().await.map_err(db(op))? {
            let d = cursor.deserialize_current().map_err(db(op))?;
            out.push(InboxRecord::pending(
                required_text(&d, "inbox", "_id")?,
                required_text(&d, "inbox", "key")?,
                required_text(&d, "inbox", "payload")?,
                required_text(&d, "inbox", "owner")?,
            ));
        }
        Ok(out)
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let done = self
            .inner
            .inbox
            .update_one(
                doc! { "_id": id, "owner": from, "state": "pending" },
                doc! { "$set": { "owner": to } },
            )
            .await
            .map_err(db("inbox_claim"))?;
        Ok(done.matched_count == 1)
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        let mark = doc! { "$set": { "expires_at": self.after(ttl) } };
        upsert(&self.inner.outbox, doc! { "_id": key }, mark).await.map_err(db("outbox_mark"))
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        let found = self
            .inner
            .outbox
            .find_one(doc! { "_id": key, "expires_at": { "$gt": self.now() } })
            .await
            .map_err(db("outbox_marked"))?;
        Ok(found.is_some())
    }
}
