//! Transports whose platform never delivers a message again (a Discord gateway): what they
//! hand in while the bot stops, or after their transport stopped here, is answered or, with
//! durability, kept for whoever handles the chat next; never refused into loss. And an
//! exclusive transport acts, and its messages run, only on the replica that runs it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::RELEASED;
use botmesh_core::traits::{Capabilities, JournalStore, Store, Verdict};
use botmesh_core::{Bot, BotBuilder, BotError, Durability, Inbound, MemoryStore};
use botmesh_testing::TestProvider;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::replica;
use crate::support::Recorder;

on_both_backends!(
    an_intake_holds_its_transport_only_while_the_replica_runs_it_and_its_leases_hold,
    a_message_of_an_exclusive_transport_handed_back_runs_only_on_the_replica_that_runs_it,
    a_reply_refused_on_a_standby_hands_the_message_to_the_leader_without_counting_an_attempt,
);

/// A provider whose platform delivers each message once.
fn once(capabilities: Capabilities) -> TestProvider {
    TestProvider::with("test", capabilities.with_delivers_once(true))
}

/// A bot that works `work` on each message and answers `did <body>`.
fn slow(provider: &TestProvider, work: Duration) -> (BotBuilder, Recorder) {
    let rec = Recorder::default();
    let b =
        rec.attach(Bot::builder().provider(provider.clone())).on_message(move |ctx| async move {
            tokio::time::sleep(work).await;
            ctx.reply(format!("did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        });
    (b, rec)
}

/// A slow bot on `provider` takes `m1`, and while its stop drains it, `m2` is handed in: what
/// `m2`'s sender was answered, and what the chat got once the stop returned.
async fn deliver_while_stopping(provider: &TestProvider) -> (Verdict, Vec<String>, Recorder) {
    let (b, rec) = slow(provider, Duration::from_millis(100));
    let bot = b.build().unwrap();
    bot.start().await.unwrap();
    assert_eq!(provider.deliver(Inbound::text("test", "m1", "c", "one")).await, Verdict::Queued);
    let stopping = {
        let bot = bot.clone();
        tokio::spawn(async move { bot.stop().await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!stopping.is_finished(), "the bot still drains m1");
    let late = provider.deliver(Inbound::text("test", "m2", "c", "two")).await;
    stopping.await.unwrap().unwrap();
    (late, provider.texts_to("c"), rec)
}

#[tokio::test(start_paused = true)]
async fn a_message_delivered_once_while_the_bot_stops_is_answered_before_the_transport_goes() {
    let (late, texts, rec) = deliver_while_stopping(&once(Capabilities::shared())).await;
    assert_eq!(late, Verdict::Queued, "taken: refusing it would lose it");
    assert_eq!(texts, ["did one", "did two"]);
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
}

#[tokio::test(start_paused = true)]
async fn a_message_a_platform_delivers_again_is_refused_while_the_bot_stops() {
    let (late, texts, _rec) = deliver_while_stopping(&TestProvider::new()).await;
    assert_eq!(late, Verdict::Unavailable, "its platform delivers it again, here or elsewhere");
    assert_eq!(texts, ["did one"]);
}

#[tokio::test(start_paused = true)]
async fn with_durability_a_message_delivered_once_after_its_transport_stopped_is_kept_for_the_next_start()
 {
    let store = Arc::new(MemoryStore::new());
    let provider = once(Capabilities::shared());
    let (b, rec) = slow(&provider, Duration::ZERO);
    let bot = b.store(Arc::clone(&store) as Arc<dyn Store>).durability(Durability::new()).build();
    let bot = bot.unwrap();
    bot.start().await.unwrap();
    // The provider still holds a message when its transport stops, and hands it in then.
    let intake = provider.intake().unwrap();
    bot.stop().await.unwrap();
    let kept = intake.accept(Inbound::text("test", "m1", "c", "late")).await;
    assert_eq!(kept, Verdict::Queued, "kept in the journal");
    let pending = store.inbox_pending(10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].owner, RELEASED, "released for whoever handles the chat next");
    assert_eq!(
        intake.accept(Inbound::text("test", "m1", "c", "late")).await,
        Verdict::Duplicate,
        "a second hand-in of the same message is not kept twice"
    );
    bot.start().await.unwrap();
    provider.settled(&bot).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(provider.texts_to("c"), ["did late"], "answered once at the next start");
    assert!(store.inbox_pending(10).await.unwrap().is_empty(), "acknowledged");
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
    bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_durability_a_message_delivered_once_after_its_transport_stopped_cannot_be_kept() {
    let provider = once(Capabilities::shared());
    let (b, _rec) = slow(&provider, Duration::ZERO);
    let bot = b.build().unwrap();
    bot.start().await.unwrap();
    let intake = provider.intake().unwrap();
    bot.stop().await.unwrap();
    let refused = intake.accept(Inbound::text("test", "m1", "c", "late")).await;
    assert_eq!(refused, Verdict::Unavailable, "nothing keeps it: the provider reports it dropped");
}

/// Three replicas of an exclusive transport's bot, durable; the leader is stopped with work
/// left that `settle` cuts short. The messages it hands back run on the next leader only: a
/// standby would run the handler and fail its reply, for nothing, and count it against the
/// message's attempts.
async fn a_message_of_an_exclusive_transport_handed_back_runs_only_on_the_replica_that_runs_it(
    backend: &impl Backend,
) {
    let ran: Arc<Mutex<HashMap<&'static str, Vec<String>>>> = Arc::default();
    let settle = |c: CoordinationConfig| c.settle(Duration::from_millis(300));
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        let ran = Arc::clone(&ran);
        let bot = move |b: BotBuilder| {
            b.durability(Durability::new().replay_every(Duration::from_millis(100))).on_message(
                move |ctx| {
                    let ran = Arc::clone(&ran);
                    async move {
                        ran.lock().unwrap().entry(name).or_default().push(ctx.body().to_owned());
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        ctx.reply(format!("did {}", ctx.body())).await?;
                        Ok::<_, BotError>(())
                    }
                },
            )
        };
        let provider = once(Capabilities::exclusive());
        replicas.push(replica(backend, name, provider, settle, bot).await);
    }
    let leader = loop {
        if let Some(i) = replicas.iter().position(|r| r.bot.runs_transport("test")) {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for i in 0..4 {
        assert!(replicas[leader].provider.inject(Inbound::text(
            "test",
            format!("m{i}"),
            "c",
            i.to_string()
        )));
    }
    replicas[leader].bot.stop().await.unwrap();
    let texts = |r: &crate::replicas::Replica| r.provider.texts_to("c");
    let answered_before_stop = texts(&replicas[leader]);
    assert!(answered_before_stop.len() < 4, "settle cut the leader short");
    let next = loop {
        if let Some(i) = replicas.iter().position(|r| r.bot.runs_transport("test")) {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    replicas[next].provider.wait_sent(4 - answered_before_stop.len()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = [answered_before_stop, texts(&replicas[next])].concat();
    assert_eq!(all, ["did 0", "did 1", "did 2", "did 3"], "each answered once, in order");
    let standby = 3 - leader - next;
    let name = ["a", "b", "c"][standby];
    let standby_ran = ran.lock().unwrap().get(name).cloned();
    assert!(standby_ran.is_none(), "the standby ran {standby_ran:?}");
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "all acknowledged"
    );
    for r in &replicas {
        r.bot.stop().await.unwrap();
    }
}

/// A standby handed a message of the exclusive transport directly (`Bot::accept` from code of
/// the user's own) cannot reply: the transport runs on the leader. The message is handed back,
/// and that run is no attempt of the message's, so even with one attempt allowed the leader
/// answers it instead of the journal giving up on it.
async fn a_reply_refused_on_a_standby_hands_the_message_to_the_leader_without_counting_an_attempt(
    backend: &impl Backend,
) {
    let bot = |b: BotBuilder| {
        b.durability(Durability::new().replay_every(Duration::from_millis(100)).max_attempts(1))
            .on_message(|ctx| async move {
                ctx.reply(format!("did {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            })
    };
    let a = replica(backend, "a", once(Capabilities::exclusive()), |c| c, bot).await;
    let b = replica(backend, "b", once(Capabilities::exclusive()), |c| c, bot).await;
    let (leader, standby) = loop {
        match (a.bot.runs_transport("test"), b.bot.runs_transport("test")) {
            (true, _) => break (&a, &b),
            (_, true) => break (&b, &a),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let accepted = standby.bot.accept(Inbound::text("test", "m1", "c", "hi")).await.unwrap();
    assert!(accepted.is_queued());
    let answered = tokio::time::timeout(Duration::from_secs(30), leader.provider.wait_sent(1));
    assert!(answered.await.is_ok(), "the leader never answered it");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(leader.provider.texts_to("c"), ["did hi"]);
    let gave_up = |r: &crate::replicas::Replica| {
        r.rec.errors().iter().any(|e| matches!(**e, BotError::GaveUp { .. }))
    };
    assert!(!gave_up(standby) && !gave_up(leader), "no attempt was counted");
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "acknowledged"
    );
}

/// A poller asks its intake before each request on its session: it holds the transport while
/// this replica runs it and its leases hold, not once its heartbeats stopped landing (another
/// replica may take the transport over then), nor once the transport stopped here.
async fn an_intake_holds_its_transport_only_while_the_replica_runs_it_and_its_leases_hold(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", once(Capabilities::exclusive()), |c| c, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.unwrap();
    let intake = a.provider.intake().unwrap();
    assert!(intake.holds_transport(), "the leader holds it");
    a.coordinator.set_stalled(true);
    let gave_up = tokio::time::timeout(Duration::from_secs(10), async {
        while intake.holds_transport() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(gave_up.await.is_ok(), "still held with no heartbeat landing");
    a.coordinator.set_stalled(false);
    a.bot.stop().await.unwrap();
    assert!(!intake.holds_transport(), "not once the transport stopped");
}
