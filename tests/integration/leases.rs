//! What a replica does when it loses its leases: the stall rule on conversations, one event per
//! lost chat, an exclusive transport stopped before a standby can start it, and the release
//! watchdog.

use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Capabilities;
use botmesh_core::{
    BotBuilder, BotError, EndReason, ErrorKind, Event, Flow, LeaseLostReason, Step,
    TransportStatus, Trigger,
};
use botmesh_testing::TestProvider;
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica, standing_by};

on_both_backends!(
    one_lost_chat_of_a_stalled_replica_is_one_lease_lost_event,
    one_lost_chat_of_a_crashed_replica_is_one_lease_lost_event,
    a_release_that_fails_on_the_wire_is_repaired_within_a_third_of_the_lease,
    a_stalled_replica_drops_its_conversation_and_never_writes_the_checkpoint_afterwards,
    a_suspended_step_s_background_task_never_writes_the_checkpoint_once_the_chat_is_taken_again,
    a_send_still_in_flight_when_the_turn_is_lost_never_reaches_the_user,
);

/// Replies after `work`.
fn slow(work: Duration) -> impl FnOnce(BotBuilder) -> BotBuilder {
    move |b| {
        b.on_message(move |ctx| async move {
            tokio::time::sleep(work).await;
            ctx.reply(format!("did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    }
}

fn lease_lost_events(r: &Replica, key: &str) -> usize {
    r.rec
        .events()
        .iter()
        .filter(|e| matches!(e, Event::LeaseLost { key: k, .. } if k.as_str() == key))
        .count()
}

fn lease_lost_errors(r: &Replica) -> usize {
    r.rec.errors().iter().filter(|e| format!("{e:?}").contains("LeaseLost")).count()
}

async fn one_lost_chat_of_a_stalled_replica_is_one_lease_lost_event(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow(LEASE * 5)).await;
    a.provider.say("c", "slow");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.set_stalled(true);
    // Heartbeats keep failing for three leases: every retry finds the replica still stalled.
    tokio::time::sleep(LEASE * 3).await;
    a.coordinator.set_stalled(false);
    a.provider.settled(&a.bot).await;
    assert_eq!(lease_lost_events(&a, "test:c"), 1, "{:?}", a.rec.events());
    assert_eq!(lease_lost_errors(&a), 0, "the loss is not reported again as an error");
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::LeaseLost { reason: LeaseLostReason::Stalled, .. })),
    );
    assert!(a.provider.sent().is_empty(), "the handler's late reply was refused");
}

async fn one_lost_chat_of_a_crashed_replica_is_one_lease_lost_event(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow(LEASE * 5)).await;
    a.provider.say("c", "slow");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.crash();
    tokio::time::sleep(LEASE * 6).await;
    assert_eq!(lease_lost_events(&a, "test:c"), 1, "{:?}", a.rec.events());
    assert_eq!(lease_lost_errors(&a), 0);
}

async fn a_release_that_fails_on_the_wire_is_repaired_within_a_third_of_the_lease(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow(Duration::ZERO)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow(Duration::ZERO)).await;
    a.coordinator.fail_releases(u32::MAX);
    a.provider.say("c", "one");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["did one"]);
    b.provider.say("c", "two");
    // The turn stays held while every release a sends is lost.
    tokio::time::sleep(LEASE).await;
    assert!(b.provider.sent().is_empty(), "b waits behind the unreleased turn");
    let t0 = Instant::now();
    a.coordinator.fail_releases(0);
    b.provider.wait_sent(1).await;
    let repaired = t0.elapsed();
    // Real time on Redis: a round trip and a poll on top of the heartbeat period.
    assert!(repaired <= LEASE / 3 + Duration::from_millis(300), "repaired after {repaired:?}");
    assert_eq!(b.provider.texts_to("c"), ["did two"]);
}

/// A persistent flow: a question, then a step that works for `work` before it finishes.
fn order(work: Duration) -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .persistent()
        .ask(botmesh_core::Ask::new("size", "Size?"))
        .do_step("pack", move |c| async move {
            c.sleep(work).await;
            let size: String = c.get("size").unwrap_or_default();
            c.send(format!("packed {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

async fn a_stalled_replica_drops_its_conversation_and_never_writes_the_checkpoint_afterwards(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(order(LEASE * 3))).await;
    let b =
        replica(backend, "b", TestProvider::new(), |c| c, |b| b.flow(order(Duration::ZERO))).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    a.provider.say("c", "M");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.set_stalled(true);
    let kept = backend.store().get_checkpoint("test:c").await.unwrap().unwrap();
    // b takes the chat once a's lease ran out, and finishes the flow from a's checkpoint.
    b.provider.say("c", "hello?");
    b.provider.wait_sent(1).await;
    assert_eq!(b.provider.texts_to("c"), ["packed M"]);
    b.provider.settled(&b.bot).await;
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "b's flow ended");
    // a recovers; its stale step wakes up and finds the turn gone: it writes and sends nothing.
    a.coordinator.set_stalled(false);
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?"]);
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "a cleared nothing back"
    );
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::LeaseLost, .. }))
    );
    // a takes the chat again: a new flow, from a clean slate.
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?", "Size?"]);
    assert_ne!(backend.store().get_checkpoint("test:c").await.unwrap().unwrap().data, kept.data);
}

async fn a_suspended_step_s_background_task_never_writes_the_checkpoint_once_the_chat_is_taken_again(
    backend: &impl Backend,
) {
    // The step hands its context to a background task, then outlives settle and is cut. The
    // same replica takes the chat again; the task wakes later and tries to ask.
    let flow = || {
        Flow::new("form").trigger(Trigger::keyword("form")).persistent().do_step(
            "work",
            |c| async move {
                let ready = c.ask("Ready?").await?;
                let stale = c.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(LEASE * 4).await;
                    // Refused: the conversation ended when its step was cut.
                    let _ = stale.ask("Again?").await;
                });
                c.sleep(LEASE * 100).await;
                c.send(format!("finished after {}", ready.body)).await?;
                Ok::<_, BotError>(Step::Next)
            },
        )
    };
    let settle = |c: CoordinationConfig| c.settle(LEASE);
    let a = replica(backend, "a", TestProvider::new(), settle, |b| b.flow(flow())).await;
    a.provider.say("c", "form");
    a.provider.settled(&a.bot).await;
    a.provider.say("c", "yes");
    a.provider.settled(&a.bot).await;
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Suspended, .. }))
    );
    a.provider.say("c", "hello");
    a.provider.settled(&a.bot).await;
    let resumed = backend.store().get_checkpoint("test:c").await.unwrap().unwrap();
    tokio::time::sleep(LEASE * 5).await;
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap().unwrap(),
        resumed,
        "the stale task wrote nothing"
    );
    assert!(a.provider.texts_to("c").iter().all(|t| t != "Again?"));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_leader_stops_its_exclusive_transport_before_the_standby_starts_it() {
    let backend = Memory::new();
    let exclusive = || TestProvider::with("wa", Capabilities::exclusive());
    let a = replica(&backend, "a", exclusive(), |c| c, |b| b).await;
    a.bot.ready().await;
    let b = replica(&backend, "b", exclusive(), |c| c, |b| b).await;
    standing_by(&b).await;
    // a's backend answers campaigns late, and its heartbeats stop getting through.
    a.coordinator.delay_leadership(LEASE / 2);
    a.coordinator.set_stalled(true);
    tokio::time::timeout(LEASE * 5, b.bot.ready()).await.unwrap();
    let stopped =
        a.provider.history().iter().find(|(_, s)| *s == TransportStatus::Closed).map(|e| e.0);
    let started = b.provider.history().first().map(|e| e.0).unwrap();
    let stopped = stopped.unwrap();
    assert!(stopped < started, "a stopped at {stopped:?}, b started at {started:?}");
    assert!(!a.bot.is_transport_running() && b.bot.is_transport_running());
    let refused = a.bot.send(&botmesh_core::Outbound::text("c", "hi")).await.unwrap_err();
    assert_eq!(refused.as_contract().map(|e| e.kind()), Some(ErrorKind::ProviderNotLeader));
}

/// A crashes holding chat `c`'s turn; returns how long b's next message of `c` waited.
async fn takeover_after_crash(
    a: Arc<dyn botmesh_core::traits::Coordinator>,
    b: Arc<dyn botmesh_core::traits::Coordinator>,
    store: Arc<dyn botmesh_core::traits::Store>,
) -> Duration {
    let bot = |coordinator: Arc<dyn botmesh_core::traits::Coordinator>| {
        let provider = TestProvider::new();
        let faulty = Arc::new(botmesh_testing::FaultyCoordinator::new(coordinator));
        let bot = botmesh_core::Bot::builder()
            .provider(provider.clone())
            .store(Arc::clone(&store))
            .coordination(CoordinationConfig::new(faulty.clone()).build())
            .on_message(|ctx| async move {
                if ctx.body() == "hold" {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                ctx.reply(format!("did {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            })
            .build()
            .unwrap();
        (bot, provider, faulty)
    };
    let (a, pa, fa) = bot(a);
    let (b, pb, _) = bot(b);
    a.start().await.unwrap();
    b.start().await.unwrap();
    pa.say("c", "hold");
    tokio::time::sleep(Duration::from_millis(50)).await;
    fa.crash();
    let t0 = Instant::now();
    pb.say("c", "next");
    tokio::time::timeout(Duration::from_secs(60), pb.wait_sent(1)).await.unwrap();
    assert_eq!(pb.texts_to("c"), ["did next"]);
    t0.elapsed()
}

#[tokio::test(start_paused = true)]
async fn the_lease_set_on_the_coordinator_is_the_one_the_runtime_uses() {
    let hub = botmesh_testing::MemoryCoordinationHub::new();
    let lease = Duration::from_secs(3);
    let coordinator = |id: &str| -> Arc<dyn botmesh_core::traits::Coordinator> {
        Arc::new(botmesh_testing::MemoryCoordinator::new(hub.clone(), id).with_lease(lease))
    };
    assert_eq!(CoordinationConfig::new(coordinator("x")).get_lease(), lease);
    let store = Arc::new(botmesh_core::MemoryStore::new());
    let waited = takeover_after_crash(coordinator("a"), coordinator("b"), store).await;
    assert!(waited >= lease * 2 / 3 && waited <= lease + lease / 3, "took over after {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn the_lease_defaults_to_fifteen_seconds() {
    let hub = botmesh_testing::MemoryCoordinationHub::new();
    let coordinator = |id: &str| -> Arc<dyn botmesh_core::traits::Coordinator> {
        Arc::new(botmesh_testing::MemoryCoordinator::new(hub.clone(), id))
    };
    assert_eq!(CoordinationConfig::new(coordinator("x")).get_lease(), Duration::from_secs(15));
    let store = Arc::new(botmesh_core::MemoryStore::new());
    let waited = takeover_after_crash(coordinator("a"), coordinator("b"), store).await;
    assert!(waited >= Duration::from_secs(10) && waited <= Duration::from_secs(20), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_coordinator_carries_the_lease_it_was_given() {
    let server = botmesh_testing::RedisServer::start().unwrap();
    let store = botmesh_redis_store::RedisStore::new(&server.url(), "lease").await.unwrap();
    let lease = Duration::from_millis(1500);
    assert_eq!(CoordinationConfig::new(store.coordinator(lease)).get_lease(), lease);
    assert_eq!(
        CoordinationConfig::new(
            botmesh_redis_store::RedisCoordinator::new(&server.url(), "lease").await.unwrap()
        )
        .get_lease(),
        Duration::from_secs(15),
        "the default"
    );
    let store: Arc<dyn botmesh_core::traits::Store> = Arc::new(store.clone());
    let redis = botmesh_redis_store::RedisStore::new(&server.url(), "lease").await.unwrap();
    let waited = takeover_after_crash(
        Arc::new(redis.coordinator(lease)),
        Arc::new(redis.coordinator(lease)),
        store,
    )
    .await;
    // Real time: a poll and a round trip on top of the lease.
    assert!(waited <= lease + lease / 3 + Duration::from_millis(300), "took over after {waited:?}");
}

async fn a_send_still_in_flight_when_the_turn_is_lost_never_reaches_the_user(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow(Duration::ZERO)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow(Duration::ZERO)).await;
    // a's reply takes three leases to go out; its heartbeats stop getting through meanwhile.
    a.provider.delay_sends(LEASE * 3);
    a.provider.say("c", "one");
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.coordinator.set_stalled(true);
    b.provider.say("c", "two");
    b.provider.wait_sent(1).await;
    a.provider.settled(&a.bot).await;
    assert!(a.provider.sent().is_empty(), "the late send was dropped: {:?}", a.provider.sent());
    assert_eq!(b.provider.texts_to("c"), ["did two"]);
    assert_eq!(lease_lost_events(&a, "test:c"), 1);
}
