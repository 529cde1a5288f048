//! The store and coordinator conformance suites against private, real Redis servers: one
//! server in both key layouts, and a real three-master cluster in the cluster layout.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_store::{KeyLayout, RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::{
    CoordinatorHarness, RedisCluster, RedisServer, claimed_capabilities, coordinator_conformance,
    store_conformance,
};
use botmesh_traits::{Coordinator, InboxAppend, InboxRecord, Store};
use common::{calls, reset_stats, script_calls};

struct Harness(RedisOptions);

impl CoordinatorHarness for Harness {
    async fn replica(&self, id: &str) -> Arc<dyn Coordinator> {
        Arc::new(RedisCoordinator::connect(self.0.clone()).await.unwrap().with_replica_id(id))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_conformance_suite_on_one_server() {
    let server = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&server.url(), "t").await.unwrap());
    assert_eq!(claimed_capabilities(&*store), ["cas", "locks", "leases", "tasks", "journal"]);
    store_conformance(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_the_application_s_own_client_passes_both_suites_and_keeps_coordination_apart() {
    let server = RedisServer::start().unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let store = RedisStore::from_client(client.clone(), "app").await.unwrap();
    let coordinator = Arc::new(store.coordinator(Duration::from_secs(2)));
    let ticket = coordinator.take_ticket(&botmesh_traits::ChatKey::from("chat")).await.unwrap();
    assert!(ticket.grant.is_some(), "a free turn comes with the ticket");
    store.set_user_data("ada", "{}").await.unwrap();
    // The application's own connection sees the store's keys and the coordination's apart.
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> =
        redis::cmd("KEYS").arg("app:*").query_async(&mut conn).await.unwrap();
    keys.sort();
    assert!(keys.contains(&"app:user:ada".to_owned()), "{keys:?}");
    assert!(keys.contains(&"app:coord:t:chat".to_owned()), "{keys:?}");
    assert!(keys.iter().all(|k| k == "app:user:ada" || k.starts_with("app:coord:")), "{keys:?}");
    store_conformance(Arc::new(store)).await;
}

/// How many `SCRIPT` commands (loads) the server executed so far: `cmdstat_script|load` (Redis
/// 7 counts subcommands apart), or `cmdstat_script` on older servers.
async fn script_commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    calls(conn, &["cmdstat_script:", "cmdstat_script|"]).await
}

/// A store on a private server, with a connection of its own to read the server's counters.
async fn private_store(
    prefix: &str,
) -> (RedisServer, redis::aio::MultiplexedConnection, RedisStore) {
    let server = RedisServer::start().unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let admin = client.get_multiplexed_async_connection().await.unwrap();
    let store = RedisStore::new(&server.url(), prefix).await.unwrap();
    (server, admin, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batched_calls_load_the_scripts_a_restarted_server_lost() {
    let (_server, mut admin, store) = private_store("lost").await;
    let coordinator = store.coordinator(Duration::from_secs(5));
    // What a restart without persistence leaves: no script in the server's cache.
    redis::cmd("SCRIPT").arg("FLUSH").query_async::<()>(&mut admin).await.unwrap();
    let loaded = script_commands(&mut admin).await;
    let key = botmesh_traits::ChatKey::from("chat");
    let ticket = coordinator.take_ticket(&key).await.unwrap();
    let grant = ticket.grant.expect("a free chat's first ticket comes with its turn");
    assert!(coordinator.release_turn(&grant).await.unwrap(), "the turn was this ticket's");
    let journal = store.journal().unwrap();
    let record = InboxRecord::pending("m1", "chat", "{}", "me");
    let appended = journal.inbox_append(&record, Duration::from_secs(60)).await.unwrap();
    assert!(matches!(appended, InboxAppend::Appended));
    journal.inbox_ack("m1").await.unwrap();
    assert!(journal.inbox_pending(10).await.unwrap().is_empty(), "acknowledged");
    journal.outbox_mark("send-1", Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        script_commands(&mut admin).await - loaded,
        3,
        "the turn script, the journal's batch and its listing, each loaded by the call that \
         missed it"
    );
}

/// Twenty chats' keys.
fn twenty_chats() -> Vec<botmesh_traits::ChatKey> {
    (0..20).map(|i| botmesh_traits::ChatKey::from(format!("chat{i}"))).collect()
}

/// Takes a ticket of each of `keys` through `coordinator`, the calls made while the server is
/// frozen, so that no call can come back before all are made, however the machine schedules
/// them: the first go alone, the rest wait for a batch. Half a second is ample for the calls
/// to be made.
async fn take_while_frozen(
    server: &RedisServer,
    coordinator: Arc<RedisCoordinator>,
    keys: Vec<botmesh_traits::ChatKey>,
) -> Vec<botmesh_traits::Result<botmesh_traits::Ticket>> {
    server.pause().unwrap();
    let taking = tokio::spawn(async move {
        let takes = keys.iter().map(|k| coordinator.take_ticket(k));
        futures_util::future::join_all(takes).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.resume().unwrap();
    taking.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_chat_s_first_ticket_writes_its_state_once_and_a_batch_reads_the_clock_once() {
    let (server, mut admin, store) = private_store("new").await;
    let coordinator = Arc::new(store.coordinator(Duration::from_secs(5)));
    reset_stats(&mut admin).await;
    for ticket in take_while_frozen(&server, coordinator, twenty_chats()).await {
        assert!(ticket.unwrap().grant.is_some(), "a new chat's first ticket takes its turn");
    }
    let batches = calls(&mut admin, &["cmdstat_evalsha:"]).await;
    assert!(batches < 20, "20 tickets taken together go in batches, {batches} calls");
    // Per chat: its counter starts from the clock and is written with the grant.
    assert_eq!(calls(&mut admin, &["cmdstat_hset:"]).await, 20, "one write of each new state");
    assert_eq!(calls(&mut admin, &["cmdstat_time:"]).await, batches, "one clock read per call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_reads_each_holder_s_liveness_once_whatever_its_number_of_chats() {
    let (server, mut admin, store) = private_store("live").await;
    let holder = store.coordinator(Duration::from_secs(5)).with_replica_id("holder");
    for key in &twenty_chats() {
        assert!(holder.take_ticket(key).await.unwrap().grant.is_some(), "a free turn");
    }
    let waiter = Arc::new(store.coordinator(Duration::from_secs(5)).with_replica_id("waiter"));
    reset_stats(&mut admin).await;
    for ticket in take_while_frozen(&server, waiter, twenty_chats()).await {
        assert!(ticket.unwrap().grant.is_none(), "each chat's turn is the holder's");
    }
    let batches = calls(&mut admin, &["cmdstat_evalsha:"]).await;
    assert!(batches < 20, "20 tickets taken together go in batches, {batches} calls");
    // Per call: one look at whether the holder lives, and one registration of the waiter.
    assert_eq!(calls(&mut admin, &["cmdstat_exists:"]).await, batches, "one liveness read");
    assert_eq!(calls(&mut admin, &["cmdstat_set:"]).await, batches, "one registration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_made_together_keep_their_order_and_take_one_sequence_step_per_batch() {
    let (_server, mut admin, store) = private_store("order").await;
    let journal = store.journal().unwrap();
    let records: Vec<InboxRecord> = (0..40)
        .map(|i| InboxRecord::pending(format!("m{i}"), format!("chat{}", i % 4), "{}", "me"))
        .collect();
    // m3 a second time among them: a duplicate in the middle of a batch.
    let mut appends: Vec<&InboxRecord> = records.iter().collect();
    appends.insert(20, &records[3]);
    reset_stats(&mut admin).await;
    let retain = Duration::from_secs(60);
    let replies =
        futures_util::future::join_all(appends.iter().map(|r| journal.inbox_append(r, retain)))
            .await;
    let batches = calls(&mut admin, &["cmdstat_evalsha:"]).await;
    let steps = calls(&mut admin, &["cmdstat_incrby:", "cmdstat_incr:"]).await;
    for (i, reply) in replies.into_iter().enumerate() {
        let expected = if i == 20 {
            InboxAppend::Duplicate { state: botmesh_traits::InboxState::Pending }
        } else {
            InboxAppend::Appended
        };
        assert_eq!(reply.unwrap(), expected, "append {i}");
    }
    let pending = journal.inbox_pending(100).await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    let expected: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, expected, "the journal's order is the order the appends were made");
    assert!(batches < 41, "41 appends made together go in batches, {batches} calls");
    assert_eq!(steps, batches, "one step of the sequence per batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_loaded_at_connect_so_a_burst_on_a_fresh_server_loads_none() {
    let (_server, mut admin, store) = private_store("burst").await;
    let loaded_at_connect = script_commands(&mut admin).await;
    assert_eq!(loaded_at_connect, 21, "the store's 13 scripts and the coordinator's 8");
    let coordinator = Arc::new(store.coordinator(Duration::from_secs(5)));
    let burst: Vec<_> = (0..200)
        .map(|i| {
            let coordinator = Arc::clone(&coordinator);
            tokio::spawn(async move {
                let key = botmesh_traits::ChatKey::from(format!("chat-{}", i % 50));
                coordinator.take_ticket(&key).await.unwrap()
            })
        })
        .collect();
    for ticket in burst {
        ticket.await.unwrap();
    }
    store.set_user_data("ada", "{}").await.unwrap();
    // The journal's appends and acknowledgements, batched: each gets its own answer.
    let store = Arc::new(store);
    let appends: Vec<_> = (0..100)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let record = InboxRecord::pending(format!("m{}", i % 50), "chat", "{}", "me");
                let journal = store.journal().unwrap();
                let appended = journal.inbox_append(&record, Duration::from_secs(60)).await;
                journal.inbox_ack(&record.id).await.unwrap();
                appended.unwrap()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for append in appends {
        outcomes.push(append.await.unwrap());
    }
    let new = outcomes.iter().filter(|o| matches!(o, InboxAppend::Appended)).count();
    assert_eq!(new, 50, "each of the 50 ids journaled once, its second append a duplicate");
    assert!(store.journal().unwrap().inbox_pending(10).await.unwrap().is_empty(), "all acked");
    assert_eq!(script_commands(&mut admin).await, loaded_at_connect, "no load on the message path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_conformance_suite_in_the_cluster_layout_on_one_server() {
    let server = RedisServer::start().unwrap();
    let options = RedisOptions::new(&server.url(), "t").layout(KeyLayout::Cluster);
    store_conformance(Arc::new(RedisStore::connect(options).await.unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_passes_the_conformance_suite_on_one_server() {
    let server = RedisServer::start().unwrap();
    coordinator_conformance(&Harness(RedisOptions::new(&server.url(), "t"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_passes_the_conformance_suite_in_the_cluster_layout_on_one_server() {
    let server = RedisServer::start().unwrap();
    coordinator_conformance(&Harness(
        RedisOptions::new(&server.url(), "t").layout(KeyLayout::Cluster),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_and_coordinator_pass_the_conformance_suites_on_a_real_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let options = RedisOptions::cluster(cluster.urls(), "t");
    store_conformance(Arc::new(RedisStore::connect(options.clone()).await.unwrap())).await;
    coordinator_conformance(&Harness(options)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_ticket_asks_redis_nothing_while_its_wake_channel_is_up() {
    let server = RedisServer::start().unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let a = RedisCoordinator::new(&server.url(), "w").await.unwrap().with_replica_id("a");
    let b = Arc::new(RedisCoordinator::new(&server.url(), "w").await.unwrap().with_replica_id("b"));
    a.heartbeat(Duration::from_secs(60)).await.unwrap();
    b.heartbeat(Duration::from_secs(60)).await.unwrap();
    // Generous: the subscription is up within milliseconds.
    for _ in 0..500 {
        if b.subscribed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(b.subscribed());
    let key = botmesh_traits::ChatKey::from("chat");
    let held = a.take_ticket(&key).await.unwrap().grant.unwrap();
    let waiting = b.take_ticket(&key).await.unwrap();
    assert!(waiting.grant.is_none());
    let waiter = {
        let b = Arc::clone(&b);
        tokio::spawn(async move { b.wait_turn(&waiting, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    reset_stats(&mut admin).await;
    // Polling every `max_poll` (100 ms) would make about twenty calls in two seconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(script_calls(&mut admin).await, 0, "no script ran while the ticket waited");
    assert!(!waiter.is_finished());
    assert!(a.release_turn(&held).await.unwrap());
    let grant = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
    assert_eq!(grant.unwrap().previous_holder.as_deref(), Some("a"), "woken by the release");
}
