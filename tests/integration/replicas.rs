//! Several bots coordinating as replicas: every scenario runs on the in-memory hub (under
//! paused time) and on a private real Redis (in real time, so the bounds below are generous).
//!
//! Kept whole: it holds the replica harness (`Replica`, `replica`) the other suites import,
//! beside the scenarios that pin it down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::{CoordinationConfig, ProviderSession};
use botmesh_core::traits::{Capabilities, CheckpointWrite};
use botmesh_core::{
    Ask, Bot, BotBuilder, BotError, EndReason, Error, ErrorKind, Event, Flow, FollowReason,
    HandoverOutcome, LeaseLostReason, Outbound, Step, TransportStatus, Trigger,
};
use botmesh_testing::{FaultyCoordinator, FaultyStore, TestProvider};
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::support::Recorder;

pub(crate) const LEASE: Duration = Duration::from_secs(1);

on_both_backends!(
    two_messages_of_one_chat_on_two_replicas_50ms_apart_run_in_order_and_never_overlap,
    different_chats_run_in_parallel_on_both_replicas,
    a_replica_crashing_with_the_turn_is_passed_over_after_the_lease,
    a_stalled_replica_s_send_fails_with_lease_lost_and_the_new_owner_proceeds,
    heartbeats_that_fail_on_a_blip_are_retried_at_once_and_the_turn_is_kept,
    a_message_that_cannot_get_its_turn_fails_with_coordination_unavailable,
    a_persistent_flow_continues_on_the_other_replica_at_the_parked_step,
    a_refused_checkpoint_write_ends_the_conversation_as_superseded,
    a_stale_timer_is_dropped_without_messaging_the_user_or_clearing_the_new_owner_s_checkpoint,
    a_step_running_past_settle_is_cut_short_keeping_its_checkpoint,
    a_checkpoint_write_on_the_wire_when_settle_cuts_the_step_lands_before_the_next_holder_starts,
    a_standby_takes_over_an_exclusive_transport_when_the_leader_crashes,
    a_leader_whose_transport_stays_down_steps_down_for_a_standby,
    a_leader_s_graceful_stop_hands_the_transport_to_a_standby_within_one_heartbeat,
    shared_sessions_run_on_every_replica,
);

pub(crate) struct Replica {
    pub(crate) bot: Bot,
    pub(crate) provider: TestProvider,
    pub(crate) coordinator: Arc<FaultyCoordinator>,
    pub(crate) rec: Recorder,
}

pub(crate) async fn replica(
    backend: &impl Backend,
    id: &str,
    provider: TestProvider,
    config: impl FnOnce(CoordinationConfig) -> CoordinationConfig,
    bot: impl FnOnce(BotBuilder) -> BotBuilder,
) -> Replica {
    let coordinator = Arc::new(FaultyCoordinator::new(backend.coordinator(id).await));
    let coordination = config(CoordinationConfig::new(coordinator.clone())).build();
    let rec = Recorder::default();
    let builder =
        Bot::builder().provider(provider.clone()).store(backend.store()).coordination(coordination);
    let bot = bot(rec.attach(builder)).build().unwrap();
    bot.start().await.unwrap();
    Replica { bot, provider, coordinator, rec }
}

type Log = Arc<Mutex<Vec<(String, String, Instant, Instant)>>>;

/// A handler that works for `work`, replies, and records (replica, body, start, end).
fn slow_echo(
    name: &'static str,
    log: &Log,
    work: Duration,
) -> impl FnOnce(BotBuilder) -> BotBuilder {
    let log = Arc::clone(log);
    move |b| {
        b.on_message(move |ctx| {
            let log = Arc::clone(&log);
            async move {
                let start = Instant::now();
                tokio::time::sleep(work).await;
                ctx.reply(format!("{name} did {}", ctx.body())).await?;
                log.lock().unwrap().push((
                    name.to_owned(),
                    ctx.body().to_owned(),
                    start,
                    Instant::now(),
                ));
                Ok::<_, BotError>(())
            }
        })
    }
}

async fn two_messages_of_one_chat_on_two_replicas_50ms_apart_run_in_order_and_never_overlap(
    backend: &impl Backend,
) {
    let log: Log = Arc::default();
    let work = Duration::from_millis(200);
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", &log, work)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", &log, work)).await;
    for round in 0..5 {
        a.provider.say("c", &format!("{round}-1"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.provider.say("c", &format!("{round}-2"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.provider.settled(&a.bot).await;
    b.provider.settled(&b.bot).await;
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|e| e.2);
    let order: Vec<&str> = log.iter().map(|e| e.1.as_str()).collect();
    let expected: Vec<String> = (0..5).flat_map(|r| [format!("{r}-1"), format!("{r}-2")]).collect();
    assert_eq!(order, expected, "handled in ticket order");
    for pair in log.windows(2) {
        assert!(pair[0].3 <= pair[1].2, "turns never overlap: {pair:?}");
    }
    assert!(log.iter().any(|e| e.0 == "a") && log.iter().any(|e| e.0 == "b"));
}

async fn different_chats_run_in_parallel_on_both_replicas(backend: &impl Backend) {
    let log: Log = Arc::default();
    let work = Duration::from_secs(1);
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", &log, work)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", &log, work)).await;
    let t0 = Instant::now();
    for i in 0..10 {
        a.provider.say(&format!("a{i}"), "x");
        b.provider.say(&format!("b{i}"), "x");
    }
    a.provider.settled(&a.bot).await;
    b.provider.settled(&b.bot).await;
    assert_eq!(log.lock().unwrap().len(), 20);
    // One after the other they would take 20 s.
    assert!(t0.elapsed() < Duration::from_secs(5), "twenty one-second handlers ran side by side");
}

async fn a_replica_crashing_with_the_turn_is_passed_over_after_the_lease(backend: &impl Backend) {
    let log: Log = Arc::default();
    let a = replica(
        backend,
        "a",
        TestProvider::new(),
        |c| c,
        slow_echo("a", &log, Duration::from_secs(3600)),
    )
    .await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", &log, Duration::ZERO))
        .await;
    a.provider.say("c", "held by a");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.provider.say("c", "queued on a");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = Instant::now();
    a.coordinator.crash();
    b.provider.say("c", "on b");
    b.provider.wait_sent(1).await;
    let waited = t0.elapsed();
    // a's last heartbeat was at most lease / 3 before the crash.
    assert!(
        waited >= LEASE * 2 / 3 - Duration::from_millis(50),
        "b waited for a's lease: {waited:?}"
    );
    assert!(
        waited <= LEASE + LEASE / 3 + Duration::from_millis(500),
        "and not much longer: {waited:?}"
    );
    assert_eq!(b.provider.texts_to("c"), ["b did on b"]);
    assert!(
        a.provider.sent().is_empty(),
        "the crashed replica's queued ticket was skipped, nothing ran"
    );
}

async fn a_stalled_replica_s_send_fails_with_lease_lost_and_the_new_owner_proceeds(
    backend: &impl Backend,
) {
    let log: Log = Arc::default();
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", &log, LEASE * 3)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", &log, Duration::ZERO))
        .await;
    a.provider.say("c", "slow");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.set_stalled(true);
    b.provider.say("c", "next");
    b.provider.wait_sent(1).await;
    assert_eq!(b.provider.texts_to("c"), ["b did next"], "the new owner proceeds");
    a.provider.settled(&a.bot).await;
    assert!(a.provider.sent().is_empty(), "the stalled replica answered nothing");
    // Its send failed with LeaseLost, which is the one LeaseLost event of the chat, not an
    // error on top of it.
    let lost: Vec<_> = a
        .rec
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::LeaseLost { key, .. } if key.as_str() == "test:c"))
        .collect();
    assert!(
        matches!(lost.as_slice(), [Event::LeaseLost { reason: LeaseLostReason::Stalled, .. }]),
        "{lost:?}"
    );
    assert!(a.rec.errors().is_empty(), "{:?}", a.rec.errors());
}

async fn heartbeats_that_fail_on_a_blip_are_retried_at_once_and_the_turn_is_kept(
    backend: &impl Backend,
) {
    let log: Log = Arc::default();
    let a = replica(
        backend,
        "a",
        TestProvider::new(),
        |c| c.settle(Duration::from_secs(60)),
        slow_echo("a", &log, LEASE * 2),
    )
    .await;
    a.provider.say("c", "x");
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Two renewals in a row fail. Waiting a whole period for the next one would leave the
    // replica without a renewal for two thirds of its lease: stalled, its turn given up.
    a.coordinator.fail_heartbeats(2);
    tokio::time::timeout(LEASE * 10, a.provider.wait_sent(1))
        .await
        .expect("the reply was sent: the turn was not given up");
    assert_eq!(a.provider.texts_to("c"), ["a did x"], "the turn outlived the failed renewals");
    assert!(
        !a.rec.events().iter().any(|e| matches!(e, Event::LeaseLost { .. })),
        "no lease was given up: {:?}",
        a.rec.events()
    );
    assert!(a.rec.errors().is_empty(), "{:?}", a.rec.errors());
}

async fn a_message_that_cannot_get_its_turn_fails_with_coordination_unavailable(
    backend: &impl Backend,
) {
    let log: Log = Arc::default();
    let short_wait = |c: CoordinationConfig| {
        c.turn_wait(Duration::from_secs(2)).settle(Duration::from_secs(7200))
    };
    let a = replica(
        backend,
        "a",
        TestProvider::new(),
        short_wait,
        slow_echo("a", &log, Duration::from_secs(3600)),
    )
    .await;
    let b = replica(
        backend,
        "b",
        TestProvider::new(),
        short_wait,
        slow_echo("b", &log, Duration::ZERO),
    )
    .await;
    a.provider.say("c", "hog");
    tokio::time::sleep(Duration::from_millis(20)).await;
    b.provider.say("c", "starved");
    b.provider.settled(&b.bot).await;
    let errors = b.rec.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].as_contract().map(Error::kind), Some(ErrorKind::CoordinationUnavailable));
    assert!(b.provider.sent().is_empty());
    drop(a);
}

fn order_flow(timeout: Option<Duration>) -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .persistent()
        .timeout(timeout)
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"))
        .do_step("done", |c| async move {
            let size: String = c.get("size").unwrap();
            let qty: String = c.get("qty").unwrap();
            c.send(format!("{qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

async fn a_persistent_flow_continues_on_the_other_replica_at_the_parked_step(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(order_flow(None))).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, |b| b.flow(order_flow(None))).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    a.provider.say("c", "3");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?", "3 x M"]);
    assert_eq!(b.provider.texts_to("c"), ["How many?"]);
    assert!(
        b.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::Handover { outcome: HandoverOutcome::Continued, .. }))
    );
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::Handover { outcome: HandoverOutcome::Dropped, .. })),
        "a dropped its stale copy"
    );
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
}

async fn a_refused_checkpoint_write_ends_the_conversation_as_superseded(backend: &impl Backend) {
    let store = backend.store();
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(order_flow(None))).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    // Another holder wrote after a's last write (a replica that took the chat while a froze).
    let newer = store.get_checkpoint("test:c").await.unwrap().unwrap();
    let rev =
        store.set_checkpoint("test:c", &CheckpointWrite::new(newer.data.clone())).await.unwrap();
    a.provider.say("c", "L");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?"], "the superseded flow stops before asking on");
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::LeaseLost { reason: LeaseLostReason::Superseded, .. }))
    );
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::LeaseLost, .. }))
    );
    assert_eq!(
        store.get_checkpoint("test:c").await.unwrap().unwrap().revision,
        rev,
        "the newer row stays"
    );
}

async fn a_stale_timer_is_dropped_without_messaging_the_user_or_clearing_the_new_owner_s_checkpoint(
    backend: &impl Backend,
) {
    let store = backend.store();
    let timeout = Some(Duration::from_secs(4));
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(order_flow(timeout))).await;
    let b =
        replica(backend, "b", TestProvider::new(), |c| c, |b| b.flow(order_flow(timeout))).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.provider.say("c", "S");
    b.provider.settled(&b.bot).await;
    // a's timer comes due at 4 s, b's at 6 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?"], "a's stale timer sent nothing");
    assert!(store.get_checkpoint("test:c").await.unwrap().is_some(), "b's checkpoint is intact");
    b.provider.wait_sent(2).await;
    assert_eq!(
        b.provider.texts_to("c"),
        ["How many?", "This conversation timed out. Send a message to start again."]
    );
}

async fn a_step_running_past_settle_is_cut_short_keeping_its_checkpoint(backend: &impl Backend) {
    let flow = || {
        Flow::new("slow").trigger(Trigger::keyword("go")).persistent().do_step(
            "work",
            |c| async move {
                let m = c.ask("Ready?").await?;
                c.sleep(Duration::from_secs(3600)).await;
                c.send(format!("finished after {}", m.body)).await?;
                Ok::<_, BotError>(Step::Next)
            },
        )
    };
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let a = replica(backend, "a", TestProvider::new(), settle, |b| b.flow(flow())).await;
    let b = replica(backend, "b", TestProvider::new(), settle, |b| b.flow(flow())).await;
    a.provider.say("c", "go");
    a.provider.settled(&a.bot).await;
    let t0 = Instant::now();
    a.provider.say("c", "yes");
    tokio::time::sleep(Duration::from_millis(20)).await;
    b.provider.say("c", "hello");
    b.provider.settled(&b.bot).await;
    assert!(t0.elapsed() >= Duration::from_secs(1), "b waited for the settle bound");
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Suspended, .. }))
    );
    assert!(backend.store().get_checkpoint("test:c").await.unwrap().is_some());
    assert!(a.provider.texts_to("c").iter().all(|t| !t.starts_with("finished")));
    // The cut step had its first answer already, recorded in the checkpoint: b feeds it that
    // answer instead of asking again, and does not take "hello" for it.
    assert!(b.provider.texts_to("c").is_empty(), "b asked nothing: {:?}", b.provider.sent());
}

async fn a_checkpoint_write_on_the_wire_when_settle_cuts_the_step_lands_before_the_next_holder_starts(
    backend: &impl Backend,
) {
    // The step works for 900 ms, then asks: its parked checkpoint is sent at 900 ms and lands
    // 600 ms later, after settle (1 s) cut the step.
    let flow = || {
        Flow::new("slow").trigger(Trigger::keyword("go")).persistent().do_step(
            "work",
            |c| async move {
                c.sleep(Duration::from_millis(900)).await;
                let m = c.ask("Next?").await?;
                c.send(format!("got {}", m.body)).await?;
                Ok::<_, BotError>(Step::Next)
            },
        )
    };
    let store = Arc::new(FaultyStore::new(backend.store()));
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let a_bot = {
        let store = Arc::clone(&store);
        move |b: BotBuilder| b.store(store).flow(flow())
    };
    let started: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let b_bot = {
        let started = Arc::clone(&started);
        move |b: BotBuilder| {
            b.flow(flow()).on(move |e| {
                if matches!(e, Event::ConversationStarted { .. }) {
                    started.lock().unwrap().push(Instant::now());
                }
            })
        }
    };
    let a = replica(backend, "a", TestProvider::new(), settle, a_bot).await;
    let b = replica(backend, "b", TestProvider::new(), settle, b_bot).await;
    a.provider.say("c", "go");
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.delay_checkpoint_writes(Duration::from_millis(600));
    tokio::time::sleep(Duration::from_millis(650)).await;
    b.provider.say("c", "hi");
    b.provider.settled(&b.bot).await;
    a.provider.settled(&a.bot).await;
    let landed = *store.landed().last().unwrap();
    let b_started = started.lock().unwrap()[0];
    assert!(landed <= b_started, "a's write landed {:?} after b began", landed - b_started);
    assert_eq!(a.provider.texts_to("c"), ["Next?"]);
    // b found the flow parked where a's last write said, and took "hi" as the answer.
    assert_eq!(b.provider.texts_to("c"), ["got hi"]);
}

/// Waits until `r` reported standing by for its exclusive transport.
pub(crate) async fn standing_by(r: &Replica) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r
        .rec
        .events()
        .iter()
        .any(|e| matches!(e, Event::Follower { reason, .. } if *reason == FollowReason::Standby))
    {
        assert!(Instant::now() < deadline, "never stood by");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_standby_takes_over_an_exclusive_transport_when_the_leader_crashes(
    backend: &impl Backend,
) {
    let exclusive = || TestProvider::with("wa", Capabilities::exclusive());
    let a = replica(backend, "a", exclusive(), |c| c, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.expect("a leads");
    let b = replica(backend, "b", exclusive(), |c| c, |b| b).await;
    standing_by(&b).await;
    assert_eq!(
        (a.provider.starts(), b.provider.starts()),
        (1, 0),
        "one connected, one standing by"
    );
    assert!(a.bot.is_transport_running() && !b.bot.is_transport_running());
    let refused = b.bot.send(&Outbound::text("c", "hi")).await.unwrap_err();
    assert_eq!(refused.as_contract().map(Error::kind), Some(ErrorKind::ProviderNotLeader));
    assert!(
        b.rec.events().iter().any(
            |e| matches!(e, Event::Follower { reason, .. } if *reason == FollowReason::Standby)
        )
    );

    let t0 = Instant::now();
    a.coordinator.crash();
    tokio::time::timeout(LEASE * 3, b.bot.ready()).await.expect("b takes over");
    let took = t0.elapsed();
    assert!(
        took <= LEASE + LEASE / 3 + Duration::from_millis(300),
        "within lease + lease/3: {took:?}"
    );
    assert_eq!(b.provider.starts(), 1);
    assert!(
        b.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::Leader { name, .. } if name == "provider:wa"))
    );
    b.bot.send(&Outbound::text("c", "hi")).await.unwrap();
}

async fn a_leader_whose_transport_stays_down_steps_down_for_a_standby(backend: &impl Backend) {
    let exclusive = || TestProvider::with("wa", Capabilities::exclusive());
    let down = |c: CoordinationConfig| {
        c.provider_down(Duration::from_secs(2)).step_down_pause(Duration::from_secs(1))
    };
    let a = replica(backend, "a", exclusive(), down, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.expect("a leads");
    let b = replica(backend, "b", exclusive(), down, |b| b).await;
    standing_by(&b).await;
    let t0 = Instant::now();
    a.provider.close();
    tokio::time::timeout(Duration::from_secs(10), b.bot.ready()).await.expect("b takes over");
    assert!(t0.elapsed() >= Duration::from_secs(2), "not before provider_down");
    assert!(a.rec.events().iter().any(
        |e| matches!(e, Event::Follower { reason, .. } if *reason == FollowReason::ProviderDown)
    ));
    assert!(!a.bot.is_transport_running());
    // a campaigns again after its pause, finds b leading, and says it stands by.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(b.bot.is_transport_running() && !a.bot.is_transport_running());
    let reasons: Vec<FollowReason> = a
        .rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Follower { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [FollowReason::ProviderDown, FollowReason::Standby],
        "a campaigned again after its pause"
    );
}

async fn a_leader_s_graceful_stop_hands_the_transport_to_a_standby_within_one_heartbeat(
    backend: &impl Backend,
) {
    let exclusive = || TestProvider::with("wa", Capabilities::exclusive());
    let a = replica(backend, "a", exclusive(), |c| c, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.expect("a leads");
    let b = replica(backend, "b", exclusive(), |c| c, |b| b).await;
    standing_by(&b).await;
    a.bot.stop().await.unwrap();
    let t0 = Instant::now();
    tokio::time::timeout(LEASE * 3, b.bot.ready()).await.expect("b takes over");
    let took = t0.elapsed();
    // One campaign period (a heartbeat's), plus a round trip on real Redis.
    assert!(took <= LEASE / 3 + Duration::from_millis(300), "took {took:?}");
    let stopped = a.provider.history().last().copied().unwrap();
    let started = b.provider.history().first().copied().unwrap();
    assert_eq!(stopped.1, TransportStatus::Closed);
    assert!(stopped.0 <= started.0, "a's transport was down before b's came up");
}

async fn shared_sessions_run_on_every_replica(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b).await;
    let b = replica(
        backend,
        "b",
        TestProvider::new(),
        |c| c.provider_session(ProviderSession::Auto),
        |b| b,
    )
    .await;
    assert_eq!((a.provider.starts(), b.provider.starts()), (1, 1));
    // Forced to the leader, the same shared provider runs on one of two replicas only.
    let forced = || TestProvider::with("forced", Capabilities::shared());
    let leader = |c: CoordinationConfig| c.provider_session(ProviderSession::Leader);
    let c = replica(backend, "c", forced(), leader, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), c.bot.ready()).await.expect("c leads");
    let d = replica(backend, "d", forced(), leader, |b| b).await;
    standing_by(&d).await;
    assert_eq!((c.provider.starts(), d.provider.starts()), (1, 0));
}

/// A replica running a flow without `.persistent()` (it lives in memory only) and echoing
/// everything else, coordinated by `coordinator`.
async fn lone_replica(
    coordinator: Arc<dyn botmesh_core::traits::Coordinator>,
) -> (Bot, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let flow = Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .ask(Ask::new("size", "Size?"))
        .ask(Ask::new("qty", "How many?"));
    let bot = rec
        .attach(Bot::builder().provider(provider.clone()))
        .flow(flow)
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .coordination(CoordinationConfig::new(coordinator).build())
        .build()
        .unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec)
}

/// Starts the flow in chat `c`, lets traffic in other chats push the coordination backend to
/// forget idle chats, then answers.
async fn a_waiting_conversation_outlives_idle_chat_eviction(
    bot: &Bot,
    provider: &TestProvider,
    rec: &Recorder,
) {
    provider.say("c", "order");
    provider.settled(bot).await;
    for chat in 0..20 {
        provider.say(&format!("other{chat}"), "hi");
        provider.settled(bot).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    provider.say("c", "M");
    provider.settled(bot).await;
    assert_eq!(provider.texts_to("c"), ["Size?", "How many?"], "the waiting flow took the answer");
    assert!(
        !rec.events().iter().any(|e| matches!(e, Event::Handover { .. })
            || matches!(e, Event::ConversationEnded { reason: EndReason::LeaseLost, .. })),
        "{:?}",
        rec.events()
    );
}

#[tokio::test(start_paused = true)]
async fn the_hub_keeps_a_chat_whose_conversation_waits_however_few_idle_chats_it_keeps() {
    let hub = botmesh_testing::MemoryCoordinationHub::with_max_idle_keys(1);
    let (bot, provider, rec) = lone_replica(Arc::new(
        botmesh_testing::MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE),
    ))
    .await;
    a_waiting_conversation_outlives_idle_chat_eviction(&bot, &provider, &rec).await;
    assert!(hub.key_count() <= 3, "the other chats were evicted: {}", hub.key_count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_a_chat_whose_conversation_waits_past_the_idle_keep() {
    let server = botmesh_testing::RedisServer::start().unwrap();
    let options = botmesh_redis_store::RedisOptions::new(&server.url(), "retain")
        .idle_keep(Duration::from_millis(50));
    let coordinator =
        botmesh_redis_store::RedisCoordinator::connect(options).await.unwrap().with_lease(LEASE);
    let (bot, provider, rec) = lone_replica(Arc::new(coordinator)).await;
    a_waiting_conversation_outlives_idle_chat_eviction(&bot, &provider, &rec).await;
}
