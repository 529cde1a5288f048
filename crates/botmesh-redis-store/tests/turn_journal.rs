//! The journal written with the turns: a coordinator made by a store in the standalone layout
//! journals a chat's messages in the script call that takes their tickets, and acknowledges a
//! message in the call that gives its turn back.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

mod common;

use std::time::Duration;

use botmesh_redis_store::{KeyLayout, RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::RedisServer;
use botmesh_traits::{
    ChatKey, Coordinator, InboxRecord, InboxState, JournalStore, JournaledTicket, ReleaseOptions,
    Store, Ticket, TurnJournal,
};

use common::{reset_stats, script_calls};

const LEASE: Duration = Duration::from_secs(5);
const RETAIN: Duration = Duration::from_secs(60);

/// A store on a private server, its coordinator (heartbeat sent), and an admin connection.
async fn setup() -> (RedisServer, redis::aio::MultiplexedConnection, RedisStore, RedisCoordinator) {
    let server = RedisServer::start().unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let admin = client.get_multiplexed_async_connection().await.unwrap();
    let store = RedisStore::new(&server.url(), "tj").await.unwrap();
    let coordinator = store.coordinator(LEASE).with_replica_id("a");
    coordinator.heartbeat(LEASE).await.unwrap();
    (server, admin, store, coordinator)
}

fn records(coordinator: &RedisCoordinator, ids: &[&str]) -> Vec<InboxRecord> {
    let owner = coordinator.incarnation();
    ids.iter()
        .map(|id| InboxRecord::pending(*id, "chat", format!("{{\"m\":\"{id}\"}}"), owner))
        .collect()
}

fn ticket(answer: &JournaledTicket) -> &Ticket {
    match answer {
        JournaledTicket::Appended(ticket) => ticket,
        other => panic!("expected a ticket, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_coordinator_made_by_the_store_in_the_standalone_layout_writes_its_journal() {
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(&server.url(), "tj").await.unwrap();
    let made = store.coordinator(LEASE);
    let place = store.journal().unwrap().place().expect("a standalone store names its journal");
    assert_eq!(made.turn_journal().map(TurnJournal::place), Some(place));
    // Another store on the same server names another journal: no coordinator of this store's
    // takes it for its own.
    let other = RedisStore::new(&server.url(), "tj").await.unwrap();
    assert_ne!(other.journal().unwrap().place(), Some(place));
    let apart = RedisCoordinator::new(&server.url(), "tj").await.unwrap();
    assert!(apart.turn_journal().is_none(), "a coordinator of its own knows no store");
    let options = RedisOptions::new(&server.url(), "tjc").layout(KeyLayout::Cluster);
    let cluster = RedisStore::connect(options).await.unwrap();
    assert_eq!(cluster.journal().unwrap().place(), None, "the journal has a hash tag of its own");
    assert!(cluster.coordinator(LEASE).turn_journal().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_s_messages_are_journaled_in_the_call_that_takes_their_tickets() {
    let (_server, mut admin, store, coordinator) = setup().await;
    let journal = coordinator.turn_journal().unwrap();
    let key = ChatKey::from("chat");
    reset_stats(&mut admin).await;
    let answers = journal
        .take_tickets_journaling(&key, &records(&coordinator, &["m1", "m2", "m3"]), RETAIN)
        .await
        .unwrap();
    assert_eq!(script_calls(&mut admin).await, 1, "one script call journals and tickets");
    assert_eq!(answers.len(), 3);
    let seqs: Vec<u64> = answers.iter().map(|a| ticket(a).seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "tickets in order: {seqs:?}");
    assert!(ticket(&answers[0]).grant.is_some(), "a free chat's turn comes with the first");
    let pending = store.inbox_pending(10).await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3"], "journaled in order");
    assert!(pending.iter().all(|r| r.owner == coordinator.incarnation() && r.key == key));
    assert_eq!(pending[1].payload, "{\"m\":\"m2\"}");

    // A retry of a pending message stops the call there: m4 is left for the caller.
    let answers = journal
        .take_tickets_journaling(&key, &records(&coordinator, &["m2", "m4"]), RETAIN)
        .await
        .unwrap();
    assert_eq!(answers, [JournaledTicket::Duplicate { state: InboxState::Pending }]);
    assert!(store.inbox_get("m4").await.unwrap().is_none(), "untouched after the duplicate");

    // An acknowledged one is a duplicate without a ticket, and the call goes on past it.
    store.inbox_ack("m1").await.unwrap();
    let answers = journal
        .take_tickets_journaling(&key, &records(&coordinator, &["m1", "m4"]), RETAIN)
        .await
        .unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0], JournaledTicket::Duplicate { state: InboxState::Acked });
    assert!(ticket(&answers[1]).seq > seqs[2], "m4's ticket comes after m3's");
    assert!(store.inbox_get("m4").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_s_release_acknowledges_its_message_in_the_same_call() {
    let (_server, mut admin, store, coordinator) = setup().await;
    let journal = coordinator.turn_journal().unwrap();
    let key = ChatKey::from("chat");
    let answers = journal
        .take_tickets_journaling(&key, &records(&coordinator, &["m1", "m2"]), RETAIN)
        .await
        .unwrap();
    let grant = ticket(&answers[0]).grant.clone().unwrap();
    let used = ReleaseOptions::used();

    // m2's ticket is ours and next: the turn passes to it here, without a call, so there is
    // nothing to save; the caller acknowledges m1 through the store.
    reset_stats(&mut admin).await;
    assert_eq!(journal.release_turn_acknowledging(&grant, &used, "m1").await.unwrap(), None);
    assert_eq!(script_calls(&mut admin).await, 0);
    assert_eq!(store.inbox_get("m1").await.unwrap().unwrap().state, InboxState::Pending);
    assert!(coordinator.release_turn_with(&grant, &used).await.unwrap());
    store.inbox_ack("m1").await.unwrap();
    let second = coordinator.wait_turn(ticket(&answers[1]), LEASE).await.unwrap();

    // The last ticket's release goes to Redis, with m2's acknowledgement.
    reset_stats(&mut admin).await;
    assert_eq!(journal.release_turn_acknowledging(&second, &used, "m2").await.unwrap(), Some(true));
    assert_eq!(script_calls(&mut admin).await, 1, "one script call releases and acknowledges");
    assert_eq!(store.inbox_get("m2").await.unwrap().unwrap().state, InboxState::Acked);
    assert!(store.inbox_pending(10).await.unwrap().is_empty());
    // The turn is free: the next ticket comes with it.
    let next = coordinator.take_ticket(&key).await.unwrap();
    assert!(next.grant.is_some(), "released");

    // A turn no longer ours still gets its message acknowledged.
    let late = journal
        .take_tickets_journaling(&key, &records(&coordinator, &["m3"]), RETAIN)
        .await
        .unwrap();
    let stale = botmesh_traits::TurnGrant::new(key.clone(), ticket(&late[0]).seq, 1, None);
    assert_eq!(journal.release_turn_acknowledging(&stale, &used, "m3").await.unwrap(), Some(false));
    assert_eq!(store.inbox_get("m3").await.unwrap().unwrap().state, InboxState::Acked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_journaling_more_messages_than_one_command_carries_indexes_them_all_in_order() {
    // 5,000 records change the index by 10,000 values, more than Redis's Lua hands one
    // command.
    const COUNT: usize = 5_000;
    let (_server, mut admin, store, coordinator) = setup().await;
    let journal = coordinator.turn_journal().unwrap();
    let ids: Vec<String> = (0..COUNT).map(|n| format!("m{n}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    reset_stats(&mut admin).await;
    let answers = journal
        .take_tickets_journaling(&ChatKey::from("chat"), &records(&coordinator, &ids), RETAIN)
        .await
        .unwrap();
    assert_eq!(script_calls(&mut admin).await, 1);
    assert_eq!(answers.len(), COUNT);
    assert!(answers.iter().all(|a| matches!(a, JournaledTicket::Appended(_))));
    let pending = store.inbox_pending(COUNT + 1).await.unwrap();
    let listed: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(listed, ids, "every message indexed, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_journaled_by_a_call_that_fails_later_are_indexed_all_the_same() {
    let (_server, mut admin, store, coordinator) = setup().await;
    let journal = coordinator.turn_journal().unwrap();
    // A take in a chat whose turn state is not a hash fails after its messages were written.
    let ok = ChatKey::from("chat");
    journal.take_tickets_journaling(&ok, &records(&coordinator, &["m0"]), RETAIN).await.unwrap();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("*:t:chat").query_async(&mut admin).await.unwrap();
    let [state] = keys.as_slice() else { panic!("one turn state: {keys:?}") };
    let broken = state.replace(":t:chat", ":t:broken");
    redis::cmd("SET").arg(&broken).arg("x").query_async::<()>(&mut admin).await.unwrap();
    let failed = journal
        .take_tickets_journaling(
            &ChatKey::from("broken"),
            &records(&coordinator, &["m1", "m2"]),
            RETAIN,
        )
        .await;
    assert!(failed.is_err(), "the take fails: {failed:?}");
    let pending = store.inbox_pending(10).await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["m0", "m1", "m2"], "what the call wrote is in the index, for a takeover");
}
