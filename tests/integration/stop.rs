//! A graceful stop: what is queued is answered before the transport goes, on one process and
//! on two replicas, nothing is sent once `stop` returned, and no background task outlives it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{JournalStore, Store};
use botmesh_core::{Bot, BotBuilder, BotError, Durability, Inbound, MemoryStore, Outbound};
use botmesh_testing::{FaultyStore, TestProvider};

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{Replica, replica};
use crate::support::{Recorder, builder};

on_both_backends!(
    a_stopping_replica_answers_what_it_can_and_hands_the_rest_to_the_other_one_exactly_once,
    a_burst_its_transport_delivered_right_before_a_replica_stops_is_answered_once_by_the_two,
);

const CHATS: usize = 10;
const PER_CHAT: usize = 5;

/// The 50 messages of the scenario: five per chat, numbered in order.
fn messages(provider: &str) -> Vec<Inbound> {
    (0..CHATS)
        .flat_map(|chat| {
            (0..PER_CHAT).map(move |i| {
                Inbound::text(
                    provider,
                    format!("{chat}-{i}"),
                    format!("c{chat}"),
                    format!("{chat}-{i}"),
                )
            })
        })
        .collect()
}

/// A handler that works for `work`, then replies `<name> did <body>`.
fn worker(name: &'static str, work: Duration) -> impl Fn(BotBuilder) -> BotBuilder + Copy {
    move |b| {
        b.on_message(move |ctx| async move {
            tokio::time::sleep(work).await;
            ctx.reply(format!("{name} did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    }
}

/// Each message's body mapped to the replies it got, checking each chat's replies come in
/// order.
fn replies(sent: &[Outbound]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    let mut last: HashMap<String, usize> = HashMap::new();
    for m in sent {
        let body = m.text_body().unwrap();
        let (_, message) = body.split_once(" did ").unwrap();
        *counts.entry(message.to_owned()).or_default() += 1;
        let (_, i) = message.split_once('-').unwrap();
        let i: usize = i.parse().unwrap();
        let previous = last.insert(m.chat.as_str().to_owned(), i);
        assert!(previous.is_none_or(|p| p < i), "{} answered out of order: {sent:?}", m.chat);
    }
    counts
}

fn assert_each_answered_once(counts: &HashMap<String, usize>) {
    for m in messages("test") {
        let n = counts.get(m.content.as_text().unwrap()).copied().unwrap_or(0);
        assert_eq!(n, 1, "message {} answered {n} times", m.id);
    }
}

#[tokio::test(start_paused = true)]
async fn stop_answers_every_queued_message_once_and_sends_nothing_after_it_returned() {
    let (b, provider, rec) = builder();
    let bot: Bot = worker("a", Duration::from_millis(50))(b).build().unwrap();
    bot.start().await.unwrap();
    for m in messages("test") {
        assert_eq!(bot.dispatch(m).unwrap(), botmesh_core::Accepted::Queued);
    }
    bot.stop().await.unwrap();
    let at_return = provider.sent();
    assert_each_answered_once(&replies(&at_return));
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(provider.sent_count(), at_return.len(), "nothing sent after stop returned");
    assert!(
        matches!(
            bot.dispatch(Inbound::text("test", "late", "c0", "late")),
            Err(BotError::NotRunning)
        ),
        "a stopped bot takes nothing new"
    );
}

/// The user's shape of a stop: the transport delivered a burst (10 chats × 5 messages) on
/// its stream, and `stop` is called at once, before the bot read them. Every one is handled
/// once, its reply sent over the transport before it goes, and nothing is reported lost.
async fn a_burst_injected_right_before_stop_is_answered_in_full() {
    let (b, provider, rec) = builder();
    let bot: Bot = worker("a", Duration::from_millis(20))(b).build().unwrap();
    bot.start().await.unwrap();
    for m in messages("test") {
        assert!(provider.inject(m), "the transport is up");
    }
    bot.stop().await.unwrap();
    assert_each_answered_once(&replies(&provider.sent()));
    assert!(rec.errors().is_empty(), "nothing lost or refused: {:?}", rec.errors());
}

#[tokio::test(start_paused = true)]
async fn a_burst_injected_right_before_stop_is_answered_in_full_in_paused_time() {
    a_burst_injected_right_before_stop_is_answered_in_full().await;
}

#[tokio::test]
async fn a_burst_injected_right_before_stop_is_answered_in_full_in_real_time() {
    a_burst_injected_right_before_stop_is_answered_in_full().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_injected_right_before_stop_is_answered_in_full_on_two_threads() {
    a_burst_injected_right_before_stop_is_answered_in_full().await;
}

/// Two durable replicas, `a` and `b`, whose handlers work `work` each and whose stops drain
/// for `settle` at most.
async fn durable_pair(
    backend: &impl Backend,
    settle: Duration,
    work: Duration,
) -> (Replica, Replica) {
    let settle = move |c: CoordinationConfig| c.settle(settle);
    let durable =
        |b: BotBuilder| b.durability(Durability::new().replay_every(Duration::from_millis(100)));
    let a =
        replica(backend, "a", TestProvider::new(), settle, move |b| worker("a", work)(durable(b)))
            .await;
    let b =
        replica(backend, "b", TestProvider::new(), settle, move |b| worker("b", work)(durable(b)))
            .await;
    (a, b)
}

/// Stops `a`, which has every message of the scenario, and checks that it answered some before
/// its transport went and nothing after, and that `b` answered the rest: each message once, in
/// each chat's order, all acknowledged.
async fn stop_a_and_b_answers_the_rest(backend: &impl Backend, a: &Replica, b: &Replica) {
    a.bot.stop().await.unwrap();
    let a_at_return = a.provider.sent();
    assert!(!a_at_return.is_empty(), "a answered what it could before its transport went");
    assert!(a_at_return.len() < CHATS * PER_CHAT, "settle ran out before a was done");
    b.provider.wait_sent(CHATS * PER_CHAT - a_at_return.len()).await;
    b.provider.settled(&b.bot).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(a.provider.sent_count(), a_at_return.len(), "a sent nothing after stop returned");
    assert_each_answered_once(&replies(&[a_at_return, b.provider.sent()].concat()));
    assert!(
        backend.store().journal().unwrap().inbox_pending(100).await.unwrap().is_empty(),
        "all acknowledged"
    );
}

/// The same burst on a replica's stream, durable, and the replica stopped at once with a
/// `settle` too short to answer it all: what it answered, it answered once before its
/// transport went; the rest the other replica answers once, in each chat's order.
async fn a_burst_its_transport_delivered_right_before_a_replica_stops_is_answered_once_by_the_two(
    backend: &impl Backend,
) {
    let (a, b) =
        durable_pair(backend, Duration::from_millis(500), Duration::from_millis(200)).await;
    for m in messages("test") {
        assert!(a.provider.inject(m), "a's transport is up");
    }
    stop_a_and_b_answers_the_rest(backend, &a, &b).await;
}

async fn a_stopping_replica_answers_what_it_can_and_hands_the_rest_to_the_other_one_exactly_once(
    backend: &impl Backend,
) {
    let (a, b) = durable_pair(backend, Duration::from_secs(1), Duration::from_millis(300)).await;
    // Every message is journaled and holds its ticket at a when the stop begins.
    // Each chat's messages arrive in order; the chats arrive side by side.
    let accepts: Vec<_> = messages("test")
        .chunks(PER_CHAT)
        .map(|chat| {
            let (bot, chat) = (a.bot.clone(), chat.to_vec());
            tokio::spawn(async move {
                for m in chat {
                    assert_eq!(bot.accept(m).await.unwrap(), botmesh_core::Accepted::Queued);
                }
            })
        })
        .collect();
    for accepted in accepts {
        accepted.await.unwrap();
    }
    // b takes over what a handed back, in each chat's order.
    stop_a_and_b_answers_the_rest(backend, &a, &b).await;
}

/// A durable echo bot on a store whose acknowledgements the test can fail.
fn durable_echo() -> (Bot, TestProvider, Recorder, Arc<FaultyStore>) {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let (b, provider, rec) = builder();
    let bot = worker("a", Duration::ZERO)(b)
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .durability(Durability::new())
        .build()
        .unwrap();
    (bot, provider, rec, store)
}

async fn pending(store: &FaultyStore) -> usize {
    store.inbox_pending(10).await.unwrap().len()
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_of_many_chats_share_a_store_call_and_the_bot_is_idle_once_they_land() {
    let (bot, provider, rec, store) = durable_echo();
    // Held a second each, so that the chats' jobs end while the first call is out.
    store.delay_acknowledgements(Duration::from_secs(1));
    bot.start().await.unwrap();
    for chat in 0..200 {
        provider.say(&format!("c{chat}"), "hi");
    }
    provider.settled(&bot).await;
    assert_eq!(provider.sent_count(), 200);
    assert_eq!(pending(&store).await, 0, "idle only once every acknowledgement landed");
    assert_eq!(store.acknowledgements_tried(), 200, "each message acknowledged once");
    let calls = store.acknowledgement_calls();
    assert!(calls <= 3, "200 acknowledgements took {calls} store calls");
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
    bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_store_that_panics_acknowledging_fails_the_call_and_the_repair_queue_lands_it() {
    let (bot, provider, rec, store) = durable_echo();
    store.panic_on_acknowledgements(1);
    bot.start().await.unwrap();
    provider.say("c1", "hi");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c1"), ["a did hi"]);
    assert_eq!(rec.errors().len(), 1, "the panic is reported: {:?}", rec.errors());
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(pending(&store).await, 0, "the repair queue acknowledged it");
    bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_acknowledgement_that_failed_is_tried_again_until_it_lands() {
    let (bot, provider, rec, store) = durable_echo();
    store.fail_acknowledgements(3);
    bot.start().await.unwrap();
    provider.say("c1", "hi");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c1"), ["a did hi"]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(pending(&store).await, 0, "the repair queue acknowledged it");
    assert_eq!(store.acknowledgements_tried(), 4);
    assert_eq!(rec.errors().len(), 3, "each failed try is reported: {:?}", rec.errors());
    bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_repair_runs_once_stop_returned_and_what_is_left_lands_at_the_next_start() {
    let (bot, provider, _rec, store) = durable_echo();
    store.fail_acknowledgements(u32::MAX);
    bot.start().await.unwrap();
    provider.say("c1", "hi");
    provider.settled(&bot).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before_stop = store.acknowledgements_tried();
    assert!(before_stop > 2, "the acknowledgement was tried again while running: {before_stop}");
    bot.stop().await.unwrap();
    let at_stop = store.acknowledgements_tried();
    assert_eq!(at_stop, before_stop + 1, "stop tries what is left once more");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(store.acknowledgements_tried(), at_stop, "a repair ran after stop returned");
    assert_eq!(pending(&store).await, 1, "the journal still holds the message");

    store.fail_acknowledgements(0);
    bot.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(pending(&store).await, 0, "the acknowledgement landed after the restart");
    assert_eq!(provider.texts_to("c1"), ["a did hi"], "the message was not handled twice");
    bot.stop().await.unwrap();
}

/// `run_until` starts the bot, serves until the signal, then stops it as `stop` does: what was
/// queued is answered first, and nothing is taken afterwards.
#[tokio::test(start_paused = true)]
async fn run_until_serves_until_the_signal_then_stops_gracefully() {
    let provider = TestProvider::new();
    let bot = Bot::builder()
        .provider(provider.clone())
        .on_message(|ctx| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            ctx.reply(format!("done {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    let (signal, fired) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let bot = bot.clone();
        tokio::spawn(async move { bot.run_until(async { fired.await.unwrap_or(()) }).await })
    };
    bot.ready().await;
    assert!(bot.status().running);
    provider.say("u1", "a");
    provider.say("u2", "b");
    // Stop while both are being handled: they are answered before the transport goes.
    tokio::time::sleep(Duration::from_millis(10)).await;
    signal.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(provider.texts_to("u1"), ["done a"]);
    assert_eq!(provider.texts_to("u2"), ["done b"]);
    assert!(!bot.status().running);
    assert!(!bot.health().ready);
    assert!(matches!(
        bot.dispatch(Inbound::text("test", "late", "u3", "c")),
        Err(BotError::NotRunning)
    ));
}
