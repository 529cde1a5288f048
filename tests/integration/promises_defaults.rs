//! The defaults the replicas and hand-over guides state, pinned by behaviour where one shows
//! them: the TTL of forwarded checkpoints, the turn wait, settle and provider-down bounds, the
//! random replica id, the 16 KiB embedded answer, the hub's 10,000 idle chats, and where
//! durable tasks take their leadership from.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Capabilities, Coordinator, Store};
use botmesh_core::{
    Ask, BotBuilder, BotError, Error, ErrorKind, Event, Flow, FlowHandover, FollowReason, Handover,
    Inbound, MemoryStore, Message, SchedulerLease, Step, TaskOptions, Trigger,
};
use botmesh_redis_store::RedisCoordinator;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, RedisServer, TestProvider};
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica};

on_both_backends!(
    an_answer_of_up_to_16_kib_is_embedded_and_fed_back_after_a_hand_over,
    an_answer_just_over_16_kib_is_not_embedded_and_its_step_asks_again,
    durable_tasks_take_their_leadership_from_the_coordinator_by_default,
    an_explicit_scheduler_lease_is_the_one_durable_tasks_use,
);

// ---- forwarded checkpoints: their time to live ----

/// A flow without `.persistent()`, with a wait timeout.
fn order(timeout: Option<Duration>) -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .timeout(timeout)
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"))
}

/// A replica forwarding `order(timeout)` with `handover`: it enters the flow at the returned
/// instant, answers it after each of `later` (counted from that instant), then crashes, so that
/// only the store's expiry can remove the checkpoint it left.
async fn forwarded_then_crashed(
    backend: &Memory,
    handover: Handover,
    timeout: Option<Duration>,
    later: &[(Duration, &str)],
) -> Instant {
    let handover = handover.flows(FlowHandover::Forward);
    let a = replica(
        backend,
        "a",
        TestProvider::new(),
        |c| c,
        |b| b.handover(handover).flow(order(timeout)),
    )
    .await;
    let t0 = Instant::now();
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    for (after, text) in later {
        tokio::time::sleep_until(t0 + *after).await;
        a.provider.say("c", text);
        a.provider.settled(&a.bot).await;
    }
    // Paused time: the writes landed at the instants they were due.
    assert!(
        t0.elapsed() <= later.last().map_or(Duration::ZERO, |l| l.0) + Duration::from_millis(10)
    );
    a.coordinator.crash();
    t0
}

/// The checkpoint is there a second before `t0 + ttl` and gone a second after.
async fn lives_until(backend: &Memory, t0: Instant, ttl: Duration) {
    let store = backend.store();
    tokio::time::sleep_until(t0 + ttl - Duration::from_secs(1)).await;
    let before = store.get_checkpoint("test:c").await.unwrap();
    assert!(before.is_some_and(|c| c.data.contains("ephemeral")), "still there before {ttl:?}");
    tokio::time::sleep_until(t0 + ttl + Duration::from_secs(1)).await;
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "expired after {ttl:?}");
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_checkpoint_without_ttl_or_timeout_lives_five_minutes() {
    assert_eq!(Handover::DEFAULT_TTL, Duration::from_secs(5 * 60));
    let backend = Memory::new();
    let t0 = forwarded_then_crashed(&backend, Handover::new(), None, &[]).await;
    lives_until(&backend, t0, Duration::from_secs(5 * 60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_checkpoint_without_ttl_lives_as_long_as_the_flow_s_timeout() {
    let backend = Memory::new();
    let timeout = Duration::from_secs(90);
    let t0 = forwarded_then_crashed(&backend, Handover::new(), Some(timeout), &[]).await;
    lives_until(&backend, t0, timeout).await;
}

#[tokio::test(start_paused = true)]
async fn an_explicit_handover_ttl_is_the_one_used() {
    // Above the flow's timeout.
    let backend = Memory::new();
    let ttl = Duration::from_secs(600);
    let t0 = forwarded_then_crashed(
        &backend,
        Handover::new().ttl(ttl),
        Some(Duration::from_secs(90)),
        &[],
    )
    .await;
    lives_until(&backend, t0, ttl).await;
    // Below the five-minute default, without a timeout.
    let backend = Memory::new();
    let ttl = Duration::from_secs(30);
    let t0 = forwarded_then_crashed(&backend, Handover::new().ttl(ttl), None, &[]).await;
    lives_until(&backend, t0, ttl).await;
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_checkpoint_never_expires_before_its_wait_s_timeout() {
    let backend = Memory::new();
    let timeout = Duration::from_secs(120);
    let handover = Handover::new().ttl(Duration::from_secs(30));
    let t0 = forwarded_then_crashed(&backend, handover, Some(timeout), &[]).await;
    lives_until(&backend, t0, timeout).await;
}

#[tokio::test(start_paused = true)]
async fn every_wait_writes_the_forwarded_checkpoint_again_with_a_fresh_ttl() {
    let backend = Memory::new();
    let ttl = Duration::from_secs(60);
    let answered = Duration::from_secs(40);
    let t0 =
        forwarded_then_crashed(&backend, Handover::new().ttl(ttl), None, &[(answered, "M")]).await;
    let store = backend.store();
    let parked = store.get_checkpoint("test:c").await.unwrap().unwrap();
    assert!(parked.data.contains(r#""step":1"#), "parked on the second question: {}", parked.data);
    // Past the first wait's expiry (t0 + 60 s), the second wait's write (t0 + 40 s) lives on.
    lives_until(&backend, t0 + answered, ttl).await;
}

// ---- coordination defaults ----

#[test]
fn coordination_waits_two_minutes_for_a_turn_and_holds_one_a_minute_by_default() {
    let hub = MemoryCoordinationHub::new();
    let config = CoordinationConfig::new(MemoryCoordinator::new(hub, "a"));
    assert_eq!(config.get_turn_wait(), Duration::from_secs(120));
    assert_eq!(config.get_settle(), Duration::from_secs(60));
}

/// A handler that works for an hour, then replies.
fn hog(b: BotBuilder) -> BotBuilder {
    b.on_message(|ctx| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        ctx.reply("hogged").await?;
        Ok::<_, BotError>(())
    })
}

fn echo(b: BotBuilder) -> BotBuilder {
    b.on_message(|ctx| async move {
        ctx.reply(format!("echo {}", ctx.body())).await?;
        Ok::<_, BotError>(())
    })
}

#[tokio::test(start_paused = true)]
async fn by_default_a_message_waits_two_minutes_for_its_turn_then_fails() {
    let backend = Memory::new();
    let long_settle = |c: CoordinationConfig| c.settle(Duration::from_secs(7200));
    let a = replica(&backend, "a", TestProvider::new(), long_settle, hog).await;
    let b = replica(&backend, "b", TestProvider::new(), |c| c, echo).await;
    a.provider.say("c", "hog");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = Instant::now();
    b.provider.say("c", "starved");
    tokio::time::sleep_until(t0 + Duration::from_secs(119)).await;
    assert!(b.rec.errors().is_empty(), "still waiting at 1:59: {:?}", b.rec.errors());
    tokio::time::sleep_until(t0 + Duration::from_secs(121)).await;
    let errors = b.rec.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].as_contract().map(Error::kind), Some(ErrorKind::CoordinationUnavailable));
    assert!(b.provider.sent().is_empty());
}

#[tokio::test(start_paused = true)]
async fn by_default_a_step_is_cut_short_after_a_minute() {
    let backend = Memory::new();
    let a = replica(&backend, "a", TestProvider::new(), |c| c, hog).await;
    let b = replica(&backend, "b", TestProvider::new(), |c| c, echo).await;
    a.provider.say("c", "hog");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = Instant::now();
    b.provider.say("c", "next");
    tokio::time::sleep_until(t0 + Duration::from_secs(59)).await;
    assert!(b.provider.sent().is_empty(), "a still holds the turn at 0:59");
    tokio::time::sleep_until(t0 + Duration::from_secs(61)).await;
    assert_eq!(b.provider.texts_to("c"), ["echo next"], "a's step was cut at one minute");
    assert!(a.provider.sent().is_empty(), "the cut step sent nothing");
}

fn stepped_down(r: &Replica) -> bool {
    r.rec.events().iter().any(
        |e| matches!(e, Event::Follower { reason, .. } if *reason == FollowReason::ProviderDown),
    )
}

#[tokio::test(start_paused = true)]
async fn by_default_a_leader_steps_down_after_its_transport_was_down_a_minute() {
    let backend = Memory::new();
    let exclusive = || TestProvider::with("wa", Capabilities::exclusive());
    let a = replica(&backend, "a", exclusive(), |c| c, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.unwrap();
    let b = replica(&backend, "b", exclusive(), |c| c, |b| b).await;
    tokio::time::sleep(LEASE).await;
    assert!(!b.bot.is_transport_running(), "b stands by");
    let t0 = Instant::now();
    a.provider.close();
    tokio::time::sleep_until(t0 + Duration::from_secs(59)).await;
    assert!(!stepped_down(&a) && !b.bot.is_transport_running(), "a still leads at 0:59");
    tokio::time::sleep_until(t0 + Duration::from_secs(62)).await;
    assert!(stepped_down(&a), "a stepped down after a minute");
    assert!(b.bot.is_transport_running(), "and b took over");
}

/// `8-4-4-4-12` hex digits, version 4, RFC 4122 variant.
fn is_uuid_v4(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
        && groups[2].starts_with('4')
        && groups[3].starts_with(['8', '9', 'a', 'b', 'A', 'B'])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_coordinator_without_a_replica_id_gets_a_random_uuid_of_its_own() {
    let server = RedisServer::start().unwrap();
    let one = RedisCoordinator::new(&server.url(), "ids").await.unwrap();
    let two = RedisCoordinator::new(&server.url(), "ids").await.unwrap();
    assert!(is_uuid_v4(one.replica_id()), "{:?}", one.replica_id());
    assert!(is_uuid_v4(two.replica_id()), "{:?}", two.replica_id());
    assert_ne!(one.replica_id(), two.replica_id(), "one id per coordinator, never shared");
    let named = RedisCoordinator::new(&server.url(), "ids").await.unwrap().with_replica_id("pod-1");
    assert_eq!(named.replica_id(), "pod-1");
}

// ---- the 16 KiB embedded answer ----

/// A step that takes its first answer, works (for an hour on the first replica, past
/// `settle`), then asks a second question.
fn survey(slow: bool) -> Flow {
    Flow::new("survey").trigger(Trigger::keyword("go")).persistent().do_step(
        "work",
        move |c| async move {
            let m = c.ask("Ready?").await?;
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            c.send(format!("finished after {} bytes", m.body.len())).await?;
            let name = c.ask("Name?").await?;
            c.send(format!("bye {}", name.body)).await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

/// An answer whose message, as a checkpoint embeds it, is the largest that fits the default
/// limit, or (`over`) one character longer; and its length in characters.
fn answer(over: bool) -> (Inbound, usize) {
    let make = |n: usize| Inbound::text("test", "answer", "c", "y".repeat(n));
    let size = |n: usize| serde_json::to_vec(&Message::new(make(n))).unwrap().len();
    // The body shows twice in the message: as its `body` and in its content.
    let per_char = size(1) - size(0);
    let fits = (Handover::DEFAULT_MAX_ANSWER_BYTES - size(0)) / per_char;
    let n = if over { fits + 1 } else { fits };
    (make(n), n)
}

/// a takes the answer and its step is cut at `settle`; b is woken by "Ann".
async fn answer_cut_over(backend: &impl Backend, over: bool) -> (Replica, usize, usize) {
    assert_eq!(Handover::DEFAULT_MAX_ANSWER_BYTES, 16 * 1024);
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let a = replica(backend, "a", TestProvider::new(), settle, |b| b.flow(survey(true))).await;
    let b = replica(backend, "b", TestProvider::new(), settle, |b| b.flow(survey(false))).await;
    a.provider.say("c", "go");
    a.provider.settled(&a.bot).await;
    let (inbound, chars) = answer(over);
    let bytes = serde_json::to_vec(&Message::new(inbound.clone())).unwrap().len();
    a.provider.inject(inbound);
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "Ann");
    b.provider.settled(&b.bot).await;
    (b, chars, bytes)
}

async fn an_answer_of_up_to_16_kib_is_embedded_and_fed_back_after_a_hand_over(
    backend: &impl Backend,
) {
    let (b, chars, bytes) = answer_cut_over(backend, false).await;
    assert!(bytes <= 16 * 1024 && bytes > 16 * 1024 - 4, "just under the limit: {bytes}");
    assert_eq!(
        b.provider.texts_to("c"),
        [format!("finished after {chars} bytes"), "bye Ann".to_owned()],
        "b was fed the embedded answer"
    );
}

async fn an_answer_just_over_16_kib_is_not_embedded_and_its_step_asks_again(
    backend: &impl Backend,
) {
    let (b, _, bytes) = answer_cut_over(backend, true).await;
    assert!(bytes > 16 * 1024 && bytes <= 16 * 1024 + 4, "just over the limit: {bytes}");
    assert_eq!(b.provider.texts_to("c"), ["Ready?"], "not recorded: the step asks again");
}

// ---- the in-memory hub's idle chats ----

/// Takes and releases a turn on `key`; returns the previous holder the grant named.
async fn serve(coordinator: &MemoryCoordinator, key: &str) -> Option<String> {
    let ticket = coordinator.take_ticket(&key.into()).await.unwrap();
    let grant = ticket.grant.unwrap();
    coordinator.release_turn(&grant).await.unwrap();
    grant.previous_holder
}

#[tokio::test(start_paused = true)]
async fn the_hub_keeps_ten_thousand_idle_chats_and_evicts_the_least_recently_used() {
    assert_eq!(MemoryCoordinationHub::DEFAULT_MAX_IDLE_KEYS, 10_000);
    let hub = MemoryCoordinationHub::new();
    let a = MemoryCoordinator::new(hub.clone(), "a");
    for i in 0..10_000 {
        serve(&a, &format!("chat{i}")).await;
    }
    assert_eq!((hub.key_count(), hub.idle_key_count()), (10_000, 10_000), "all kept");
    // chat0 is used again, so chat1 is now the least recently used.
    assert_eq!(serve(&a, "chat0").await.as_deref(), Some("a"));
    serve(&a, "chat10000").await;
    assert_eq!((hub.key_count(), hub.idle_key_count()), (10_000, 10_000), "one evicted");
    assert_eq!(serve(&a, "chat0").await.as_deref(), Some("a"), "chat0 was kept");
    assert_eq!(serve(&a, "chat10000").await.as_deref(), Some("a"), "the newest was kept");
    assert_eq!(serve(&a, "chat1").await, None, "chat1 was evicted: re-created, no holder known");
}

// ---- the scheduler's leadership ----

const EVERY: Duration = Duration::from_millis(200);

/// A replica running the durable task `report` every 200 ms, counting its runs.
async fn reporting(
    backend: &impl Backend,
    runs: &Arc<AtomicUsize>,
    bot: impl FnOnce(BotBuilder) -> BotBuilder,
) -> Replica {
    let runs = Arc::clone(runs);
    let job = move |_: botmesh_core::JobCtx| {
        runs.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, BotError>(()) }
    };
    replica(
        backend,
        "a",
        TestProvider::new(),
        |c| c,
        |b| bot(b).every_with(EVERY, TaskOptions::durable("report"), job),
    )
    .await
}

async fn ran(runs: &AtomicUsize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(EVERY / 4).await;
    }
}

async fn durable_tasks_take_their_leadership_from_the_coordinator_by_default(
    backend: &impl Backend,
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let _a = reporting(backend, &runs, |b| b).await;
    ran(&runs).await;
    let probe = backend.coordinator("probe").await;
    probe.heartbeat(LEASE).await.unwrap();
    assert!(
        probe.try_lead("task:report", LEASE).await.unwrap().is_none(),
        "a holds task:report on the coordinator"
    );
    let taken = backend
        .store()
        .leases()
        .unwrap()
        .acquire_lease("task:report", "probe", LEASE)
        .await
        .unwrap();
    assert!(taken.is_some(), "the store's lease of that name is not what a took");
}

async fn an_explicit_scheduler_lease_is_the_one_durable_tasks_use(backend: &impl Backend) {
    let runs = Arc::new(AtomicUsize::new(0));
    let leases: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lease = SchedulerLease::Store(Arc::clone(&leases));
    let _a = reporting(backend, &runs, |b| b.scheduler_lease(lease)).await;
    ran(&runs).await;
    let taken =
        leases.leases().unwrap().acquire_lease("task:report", "probe", LEASE).await.unwrap();
    assert!(taken.is_none(), "a holds task:report in the store it was given");
    let probe = backend.coordinator("probe").await;
    probe.heartbeat(LEASE).await.unwrap();
    assert!(
        probe.try_lead("task:report", LEASE).await.unwrap().is_some(),
        "the coordinator's leadership of that name is free"
    );
}
