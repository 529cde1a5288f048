//! The store conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failed expectation is a failed test, reported by its panic"
)]

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    CasOutcome, CasStore, ChatId, ChatKey, ChatRecord, CheckpointWrite, InboxAppend, InboxRecord,
    InboxState, JournalStore, LeaseStore, LockStore, Store, TaskStore,
};

/// How long the suite's short-lived entries live, and how long it waits for them to expire:
/// twice as long, so that a backend's clock granularity (Redis expires in milliseconds, SQL
/// servers compare timestamps) cannot make an expiry look late. Under paused tokio time both
/// pass instantly.
const TTL: Duration = Duration::from_millis(300);
const PAST_TTL: Duration = Duration::from_millis(700);
/// How long an entry lives when the suite needs it held across several statements: a loaded
/// machine can take longer than [`TTL`] between two queries, and the entry must not expire then.
const HELD: Duration = Duration::from_secs(60);

/// Checks `store` against the contract, panicking on the first difference: the required
/// [`Store`] methods, then every capability its accessors report ([`Store::cas`],
/// [`Store::locks`], [`Store::leases`], [`Store::tasks`], [`Store::journal`]).
///
/// A store that claims a capability through its accessor must pass that capability's checks;
/// what it does not claim is not checked, since the runtime never asks for it. Keys are
/// prefixed with a fresh id, so the suite can run against a backend shared with other tests.
pub async fn store_conformance(store: Arc<dyn Store>) {
    let p = format!("conf-{}", uuid::Uuid::new_v4().simple());
    chats(&*store, &p).await;
    user_data(&*store, &p).await;
    checkpoints(&*store, &p).await;
    if let Some(cas) = store.cas() {
        compare_and_set(&*store, cas, &p).await;
        racing_writers(&[Arc::clone(&store)], &format!("{p}:race"), 4, 100).await;
    }
    if let Some(locks) = store.locks() {
        fenced_locks(locks, &p).await;
    }
    if let Some(leases) = store.leases() {
        self::leases(leases, &p).await;
    }
    if let Some(tasks) = store.tasks() {
        self::tasks(tasks, &p).await;
    }
    if let Some(journal) = store.journal() {
        inbox(journal, &p).await;
        outbox(journal, &p).await;
    }
}

/// The capabilities `store`'s accessors claim, by accessor name, in the order of [`Store`]'s
/// docs: `cas`, `locks`, `leases`, `tasks`, `journal`. They are what [`store_conformance`]
/// checks beyond the required methods, so a store crate asserts them next to the suite: a
/// capability it stops claiming then fails its tests instead of going unchecked.
pub fn claimed_capabilities(store: &dyn Store) -> Vec<&'static str> {
    [
        ("cas", store.cas().is_some()),
        ("locks", store.locks().is_some()),
        ("leases", store.leases().is_some()),
        ("tasks", store.tasks().is_some()),
        ("journal", store.journal().is_some()),
    ]
    .into_iter()
    .filter_map(|(name, claimed)| claimed.then_some(name))
    .collect()
}

/// Durable task records: a claim lands only for an occurrence later than every one claimed
/// before, and of writers racing for one occurrence exactly one gets it.
async fn tasks(store: &dyn TaskStore, p: &str) {
    let id = format!("{p}:task");
    assert_eq!(store.task_last(&id).await.unwrap(), None, "a new task has no claim");
    assert!(store.task_claim(&id, 5).await.unwrap(), "the first claim lands");
    assert_eq!(store.task_last(&id).await.unwrap(), Some(5));
    assert!(!store.task_claim(&id, 5).await.unwrap(), "an occurrence is claimed once");
    assert!(!store.task_claim(&id, 3).await.unwrap(), "an earlier occurrence is refused");
    assert_eq!(store.task_last(&id).await.unwrap(), Some(5));
    // Occurrences are milliseconds since the epoch for cron jobs: larger than any small count,
    // and compared as numbers, not text.
    let late = 1_764_806_400_000_u64;
    assert!(store.task_claim(&id, late).await.unwrap());
    assert!(!store.task_claim(&id, 99).await.unwrap(), "99 sorts after 1764... as text only");
    assert_eq!(store.task_last(&id).await.unwrap(), Some(late));
    let other = format!("{p}:task-other");
    assert_eq!(store.task_last(&other).await.unwrap(), None, "tasks are kept apart");
    // Eight writers race for each of ten occurrences of a fresh task.
    let racing = format!("{p}:task-race");
    for occurrence in 1..=10 {
        let claims = (0..8).map(|_| {
            let racing = racing.clone();
            async move { store.task_claim(&racing, occurrence).await.unwrap() }
        });
        let won = futures_util::future::join_all(claims).await.into_iter().filter(|w| *w).count();
        assert_eq!(won, 1, "occurrence {occurrence} was claimed {won} times");
    }
}

async fn chats(store: &dyn Store, p: &str) {
    let id = ChatId::from(format!("{p}:chat"));
    assert_eq!(store.get_chat(&id).await.unwrap(), None, "a missing chat reads as None");
    let mut first = ChatRecord::new(id.clone(), "test", 1_000);
    first.lang = Some("es".into());
    store.upsert_chat(&first).await.unwrap();
    assert_eq!(store.get_chat(&id).await.unwrap().as_ref(), Some(&first));
    let later = ChatRecord::new(id.clone(), "test", 5_000);
    store.upsert_chat(&later).await.unwrap();
    let got = store.get_chat(&id).await.unwrap().unwrap();
    assert_eq!(got.first_seen_ms, 1_000, "an upsert keeps first_seen_ms");
    assert_eq!(got.last_seen_ms, 5_000, "an upsert moves last_seen_ms");
    assert_eq!(got.lang.as_deref(), Some("es"), "an upsert without a language keeps the old one");
}

async fn user_data(store: &dyn Store, p: &str) {
    let key = format!("{p}:user");
    assert_eq!(store.get_user_data(&key).await.unwrap(), None);
    store.set_user_data(&key, r#"{"name":"Ana"}"#).await.unwrap();
    assert_eq!(store.get_user_data(&key).await.unwrap().as_deref(), Some(r#"{"name":"Ana"}"#));
    store.set_user_data(&key, r#"{"name":"Bea"}"#).await.unwrap();
    assert_eq!(store.get_user_data(&key).await.unwrap().as_deref(), Some(r#"{"name":"Bea"}"#));
}

async fn checkpoints(store: &dyn Store, p: &str) {
    let key = format!("{p}:cp");
    assert_eq!(store.get_checkpoint(&key).await.unwrap(), None);
    let r1 = store.set_checkpoint(&key, &CheckpointWrite::new(r#"{"step":1}"#)).await.unwrap();
    let got = store.get_checkpoint(&key).await.unwrap().unwrap();
    assert_eq!((got.data.as_str(), got.revision), (r#"{"step":1}"#, r1));
    let r2 = store.set_checkpoint(&key, &CheckpointWrite::new(r#"{"step":2}"#)).await.unwrap();
    assert!(r2 > r1, "revisions increase with every write");
    store.clear_checkpoint(&key).await.unwrap();
    assert_eq!(store.get_checkpoint(&key).await.unwrap(), None);
    let r3 = store.set_checkpoint(&key, &CheckpointWrite::new("{}")).await.unwrap();
    assert!(r3 > r2, "revisions keep increasing across a clear");
    store.clear_checkpoint(&key).await.unwrap();

    let held_key = format!("{p}:cp-held");
    store.set_checkpoint(&held_key, &CheckpointWrite::new("{}").with_ttl(HELD)).await.unwrap();
    assert!(store.get_checkpoint(&held_key).await.unwrap().is_some(), "alive within its ttl");
    store.clear_checkpoint(&held_key).await.unwrap();
    let ttl_key = format!("{p}:cp-ttl");
    store.set_checkpoint(&ttl_key, &CheckpointWrite::new("{}").with_ttl(TTL)).await.unwrap();
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(
        store.get_checkpoint(&ttl_key).await.unwrap(),
        None,
        "a checkpoint expires after its ttl"
    );
}

/// Compare-and-set through `cas`, the capability `store`'s accessor returned: it works on the
/// store's own rows.
async fn compare_and_set(plain: &dyn Store, store: &dyn CasStore, p: &str) {
    let w = |s: &str| CheckpointWrite::new(s);
    let shared_key = format!("{p}:cas-same-rows");
    let plain_revision = plain.set_checkpoint(&shared_key, &w("plain")).await.unwrap();
    assert!(
        matches!(
            store.set_checkpoint_if(&shared_key, &w("cas"), Some(plain_revision)).await.unwrap(),
            CasOutcome::Written { .. }
        ),
        "compare-and-set sees the rows the store's plain writes wrote"
    );
    assert_eq!(plain.get_checkpoint(&shared_key).await.unwrap().unwrap().data, "cas");
    plain.clear_checkpoint(&shared_key).await.unwrap();
    let key = format!("{p}:cas");
    let CasOutcome::Written { revision: r1 } =
        store.set_checkpoint_if(&key, &w("a"), None).await.unwrap()
    else {
        panic!("a create on a missing key must land");
    };
    assert_eq!(
        store.set_checkpoint_if(&key, &w("b"), None).await.unwrap(),
        CasOutcome::Conflict { current: Some(r1) },
        "a create on an existing key is refused"
    );
    let CasOutcome::Written { revision: r2 } =
        store.set_checkpoint_if(&key, &w("c"), Some(r1)).await.unwrap()
    else {
        panic!("a write with the current revision must land");
    };
    assert!(r2 > r1);
    assert_eq!(
        store.set_checkpoint_if(&key, &w("d"), Some(r1)).await.unwrap(),
        CasOutcome::Conflict { current: Some(r2) },
        "a write with a stale revision is refused"
    );
    assert_eq!(store.get_checkpoint(&key).await.unwrap().unwrap().data, "c");
    assert!(!store.clear_checkpoint_if(&key, r1).await.unwrap(), "a stale clear is refused");
    assert_eq!(
        store.get_checkpoint(&key).await.unwrap().unwrap().revision,
        r2,
        "a refused clear leaves the newer row"
    );
    assert!(store.clear_checkpoint_if(&key, r2).await.unwrap());
    assert_eq!(store.get_checkpoint(&key).await.unwrap(), None);
    assert!(
        !store.clear_checkpoint_if(&key, r2).await.unwrap(),
        "clearing a missing row is refused"
    );
    assert_eq!(
        store.set_checkpoint_if(&key, &w("e"), Some(r2)).await.unwrap(),
        CasOutcome::Conflict { current: None },
        "a write expecting a cleared revision is refused"
    );
    let CasOutcome::Written { revision: r3 } =
        store.set_checkpoint_if(&key, &w("f"), None).await.unwrap()
    else {
        panic!("a create after a clear must land");
    };
    assert!(r3 > r2, "a re-created checkpoint never reuses a revision");
    let ttl_key = format!("{p}:cas-ttl");
    let CasOutcome::Written { .. } =
        store.set_checkpoint_if(&ttl_key, &w("t").with_ttl(TTL), None).await.unwrap()
    else {
        panic!("a create with a ttl must land");
    };
    tokio::time::sleep(PAST_TTL).await;
    assert!(
        matches!(
            store.set_checkpoint_if(&ttl_key, &w("u"), None).await.unwrap(),
            CasOutcome::Written { .. }
        ),
        "an expired checkpoint counts as missing"
    );
}

/// `writers` tasks, spread in turn over `stores` (separate clients or pools of one backend),
/// race `set_checkpoint_if` on the current revision of `key`, `rounds` times: exactly one wins
/// each round, and the last winner's write is the one stored. `stores` must not be empty, and
/// each must have compare-and-set ([`Store::cas`]).
///
/// The store conformance suite runs it on one store; store crates run it across two clients.
pub async fn racing_writers(stores: &[Arc<dyn Store>], key: &str, writers: usize, rounds: usize) {
    let mut expected = stores[0].set_checkpoint(key, &CheckpointWrite::new("0")).await.unwrap();
    for round in 0..rounds {
        let mut tasks = Vec::new();
        for w in 0..writers {
            let store = Arc::clone(&stores[w % stores.len()]);
            let key = key.to_owned();
            tasks.push(tokio::spawn(async move {
                let cas = store.cas().expect("racing writers need compare-and-set");
                cas.set_checkpoint_if(
                    &key,
                    &CheckpointWrite::new(format!("{round}:{w}")),
                    Some(expected),
                )
                .await
                .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            if let CasOutcome::Written { revision } = t.await.unwrap() {
                winners.push(revision);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one writer wins a revision");
        expected = winners[0];
    }
    let last = stores[stores.len() - 1].get_checkpoint(key).await.unwrap().unwrap();
    assert_eq!(last.revision, expected, "the last winner's write is the one stored");
}

async fn fenced_locks(store: &dyn LockStore, p: &str) {
    let key = format!("{p}:lock");
    let a = store.acquire_lock_fenced(&key, TTL).await.unwrap().expect("a free lock is granted");
    assert!(store.renew_lock(&key, &a.token, HELD).await.unwrap());
    assert_eq!(store.acquire_lock_fenced(&key, TTL).await.unwrap(), None, "a held lock is refused");
    assert!(!store.release_lock(&key, "not-the-token").await.unwrap());
    assert!(!store.renew_lock(&key, "not-the-token", TTL).await.unwrap());
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(
        store.acquire_lock_fenced(&key, TTL).await.unwrap(),
        None,
        "a renewed lock outlives its first ttl"
    );
    assert!(store.release_lock(&key, &a.token).await.unwrap());
    assert!(!store.release_lock(&key, &a.token).await.unwrap(), "a lock is released once");
    let b =
        store.acquire_lock_fenced(&key, TTL).await.unwrap().expect("a released lock is granted");
    assert!(b.fence > a.fence, "the fence grows on every acquisition");
    assert_ne!(a.token, b.token);
    tokio::time::sleep(PAST_TTL).await;
    assert!(
        !store.renew_lock(&key, &b.token, TTL).await.unwrap(),
        "an expired lock cannot be renewed"
    );
    let c =
        store.acquire_lock_fenced(&key, HELD).await.unwrap().expect("an expired lock is granted");
    assert!(c.fence > b.fence);
    assert!(
        !store.release_lock(&key, &b.token).await.unwrap(),
        "a stale holder cannot release the new lock"
    );
    assert!(store.release_lock(&key, &c.token).await.unwrap());
}

async fn leases(store: &dyn LeaseStore, p: &str) {
    let name = format!("{p}:lease");
    let a = store.acquire_lease(&name, "a", HELD).await.unwrap().expect("a free lease is granted");
    assert_eq!(
        store.acquire_lease(&name, "b", TTL).await.unwrap(),
        None,
        "a held lease is refused"
    );
    assert_eq!(
        store.acquire_lease(&name, "a", HELD).await.unwrap(),
        Some(a),
        "the holder renews with the same fence"
    );
    assert!(!store.renew_lease(&name, "b", TTL).await.unwrap());
    assert!(!store.release_lease(&name, "b",).await.unwrap());
    assert!(store.renew_lease(&name, "a", HELD).await.unwrap());
    assert!(store.release_lease(&name, "a").await.unwrap());
    let b =
        store.acquire_lease(&name, "b", TTL).await.unwrap().expect("a released lease is granted");
    assert!(b.fence > a.fence, "the fence grows with a new holder");
    tokio::time::sleep(PAST_TTL).await;
    assert!(
        !store.renew_lease(&name, "b", TTL).await.unwrap(),
        "an expired lease cannot be renewed"
    );
    let c =
        store.acquire_lease(&name, "a", HELD).await.unwrap().expect("an expired lease is granted");
    assert!(c.fence > b.fence);
    assert!(store.release_lease(&name, "a").await.unwrap());
}

async fn inbox(store: &dyn JournalStore, p: &str) {
    let id = format!("{p}:in1");
    let id2 = format!("{p}:in2");
    let key = ChatKey::from(format!("{p}:chat"));
    let retain = Duration::from_secs(60);
    let rec = InboxRecord::pending(&id, key.clone(), r#"{"body":"hi"}"#, "replica-a");
    assert_eq!(store.inbox_append(&rec, retain).await.unwrap(), InboxAppend::Appended);
    assert_eq!(
        store.inbox_append(&rec, retain).await.unwrap(),
        InboxAppend::Duplicate { state: InboxState::Pending },
        "a journaled id is not appended twice"
    );
    let rec2 = InboxRecord::pending(&id2, key.clone(), "{}", "replica-a");
    assert_eq!(store.inbox_append(&rec2, retain).await.unwrap(), InboxAppend::Appended);
    let pending: Vec<_> = store
        .inbox_pending(10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.id.starts_with(p))
        .collect();
    assert_eq!(
        pending.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [id.as_str(), id2.as_str()],
        "pending records come oldest first"
    );
    assert_eq!(pending[0].payload, r#"{"body":"hi"}"#);
    assert_eq!(pending[0].key, key);
    let other_id = format!("{p}:in-other");
    let other = InboxRecord::pending(&other_id, ChatKey::from(format!("{p}:other")), "{}", "a");
    assert_eq!(store.inbox_append(&other, retain).await.unwrap(), InboxAppend::Appended);
    let for_chat = store.inbox_pending_for(&key, 10).await.unwrap();
    assert_eq!(
        for_chat.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [id.as_str(), id2.as_str()],
        "a chat's pending records, oldest first, and no other chat's"
    );
    assert_eq!(store.inbox_pending_for(&key, 1).await.unwrap().len(), 1, "at most `limit`");
    store.inbox_ack(&other_id).await.unwrap();
    let got = store.inbox_get(&id).await.unwrap().expect("a journaled record can be read");
    assert_eq!((got.payload.as_str(), got.state), (r#"{"body":"hi"}"#, InboxState::Pending));
    assert_eq!(store.inbox_get(&format!("{p}:nothing")).await.unwrap(), None);
    assert!(
        !store.inbox_claim(&id, "replica-x", "replica-b").await.unwrap(),
        "only the owner's record can be claimed from it"
    );
    assert!(store.inbox_claim(&id, "replica-a", "replica-b").await.unwrap());
    assert!(
        !store.inbox_claim(&id, "replica-a", "replica-c").await.unwrap(),
        "a claimed record moved on"
    );
    store.inbox_ack(&id).await.unwrap();
    assert_eq!(
        store.inbox_append(&rec, retain).await.unwrap(),
        InboxAppend::Duplicate { state: InboxState::Acked },
        "an acknowledged id is still a duplicate"
    );
    let pending: Vec<_> = store
        .inbox_pending(10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.id.starts_with(p))
        .collect();
    assert_eq!(pending.len(), 1, "acknowledged records are not pending");
    let acked = store.inbox_get(&id).await.unwrap().expect("kept for dedupe after the ack");
    assert_eq!((acked.state, acked.owner.as_str()), (InboxState::Acked, "replica-b"));
    assert_eq!(pending[0].owner, "replica-a");

    let short = format!("{p}:in3");
    let rec3 = InboxRecord::pending(&short, key.clone(), "{}", "replica-a");
    store.inbox_append(&rec3, TTL).await.unwrap();
    store.inbox_ack(&short).await.unwrap();
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(
        store.inbox_append(&rec3, TTL).await.unwrap(),
        InboxAppend::Appended,
        "an acknowledged id is forgotten after its retention"
    );
    // Several at once, one of them acknowledged already: each ends up acknowledged.
    store.inbox_ack_batch(&[short.clone(), id2.clone(), id.clone()]).await.unwrap();
    let pending = store.inbox_pending(10_000).await.unwrap();
    assert!(
        !pending.iter().any(|r| r.id == short || r.id == id2),
        "a batch acknowledges each of its records"
    );
    let acked = store.inbox_get(&id2).await.unwrap().expect("kept for dedupe after the ack");
    assert_eq!(acked.state, InboxState::Acked);
    store.inbox_ack_batch(&[]).await.unwrap();
}

async fn outbox(store: &dyn JournalStore, p: &str) {
    let held = format!("{p}:out-held");
    assert!(!store.outbox_marked(&held).await.unwrap(), "nothing marked yet");
    store.outbox_mark(&held, HELD).await.unwrap();
    assert!(store.outbox_marked(&held).await.unwrap(), "a marked send reads as marked");
    assert!(store.outbox_marked(&held).await.unwrap(), "reading it changes nothing");
    assert!(!store.outbox_marked(&format!("{p}:out-never")).await.unwrap(), "marks are per key");
    let key = format!("{p}:out");
    let renewed = format!("{p}:out-renewed");
    store.outbox_mark(&key, TTL).await.unwrap();
    store.outbox_mark(&renewed, TTL).await.unwrap();
    // A mark made again (a retry after a lost reply) counts its ttl from the later mark.
    store.outbox_mark(&renewed, HELD).await.unwrap();
    store.outbox_mark(&held, HELD).await.unwrap();
    tokio::time::sleep(PAST_TTL).await;
    assert!(!store.outbox_marked(&key).await.unwrap(), "a mark is forgotten after its ttl");
    assert!(store.outbox_marked(&renewed).await.unwrap(), "the later mark's ttl counts");
    assert!(store.outbox_marked(&held).await.unwrap(), "marking again keeps a send marked");
    store.outbox_mark(&key, HELD).await.unwrap();
    assert!(store.outbox_marked(&key).await.unwrap(), "an expired mark is made again");
}
