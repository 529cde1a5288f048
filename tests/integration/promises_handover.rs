//! Promises of the replicas and hand-over guides that no other test pins: the `not-forwarded`
//! fallback, the notify text, a custom fallback that lets the message go, stubs cleared at a
//! normal end, plain flows lost elsewhere, `goto` and the idle watchdog under coordination, and
//! the errors a handler sees while Redis is down. Scenarios run on the in-memory hub (paused
//! time) and on a private real Redis (real time, so the bounds are generous).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{
    Ask, Bot, BotBuilder, BotError, Conversation, Durability, EndReason, Error, ErrorKind, Event,
    Fallback, FallbackReason, Flow, Handover, HandoverOutcome, Inbound, LeaseLostReason, Step,
    Trigger,
};
use botmesh_redis_store::{RedisCoordinator, RedisOptions, RedisStore};
use botmesh_testing::{FaultyStore, RedisServer, TestProvider};
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica};
use crate::support::Recorder;

on_both_backends!(
    a_plain_flow_not_forwarded_goes_to_fallback_notify_with_reason_not_forwarded,
    a_plain_flow_not_forwarded_is_entered_again_by_fallback_restart,
    fallback_notify_replies_the_handover_notify_message,
    a_custom_fallback_returning_false_lets_the_message_route_and_says_not_consumed,
    the_stub_a_conversation_leaves_is_cleared_when_it_ends_normally,
    a_plain_flow_lost_on_another_replica_routes_the_message_there_as_a_new_one,
    goto_runs_the_next_flow_under_the_same_turn_and_it_continues_on_another_replica,
    the_idle_watchdog_acts_under_a_turn_of_its_own,
    a_stale_copy_s_idle_watchdog_waits_for_the_turn_and_is_dropped_without_a_word,
    a_checkpoint_write_that_fails_ends_the_conversation_like_a_lost_turn,
    a_wait_s_timeout_restarts_on_the_replica_that_takes_the_chat_over,
);

const INTERRUPTED: &str = "Sorry, our conversation was interrupted. Let's start again.";

fn outcomes(r: &Replica) -> Vec<HandoverOutcome> {
    r.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Handover { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect()
}

/// A flow without `.persistent()`.
fn order() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"))
        .do_step("done", |c| async move {
            let size: String = c.get("size").unwrap_or_default();
            let qty: String = c.get("qty").unwrap_or_default();
            c.send(format!("{qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

fn support() -> Conversation {
    Conversation::new("support", |c| async move {
        let problem = c.ask("What went wrong?").await?;
        c.send(format!("Noted: {}", problem.body)).await?;
        Ok::<_, BotError>(())
    })
    .trigger(Trigger::keyword("help"))
}

fn echo(b: BotBuilder) -> BotBuilder {
    b.on_message(|ctx| async move {
        ctx.reply(format!("echo {}", ctx.body())).await?;
        Ok::<_, BotError>(())
    })
}

/// Two replicas with `handover`, the `order` flow, `support` and an echo; a enters what
/// `start` triggers on each of `chats` and crashes.
async fn cut_over(
    backend: &impl Backend,
    handover: impl Fn() -> Handover,
    start: &str,
    chats: &[&str],
) -> (Replica, Replica) {
    let bot = |h: Handover| {
        move |b: BotBuilder| echo(b.handover(h).flow(order()).conversation(support()))
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot(handover())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot(handover())).await;
    for chat in chats {
        a.provider.say(chat, start);
    }
    a.provider.settled(&a.bot).await;
    a.coordinator.crash();
    (a, b)
}

async fn a_plain_flow_not_forwarded_goes_to_fallback_notify_with_reason_not_forwarded(
    backend: &impl Backend,
) {
    let (a, b) =
        cut_over(backend, || Handover::new().fallback(Fallback::Notify), "order", &["c"]).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?"]);
    let stub = backend.store().get_checkpoint("test:c").await.unwrap().unwrap();
    assert!(stub.data.contains("not-forwarded"), "a left a stub, not the flow: {}", stub.data);
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [INTERRUPTED], "told, and M was consumed");
    assert_eq!(outcomes(&b), [HandoverOutcome::Notified(FallbackReason::NotForwarded)]);
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "the stub is cleared"
    );
}

async fn a_plain_flow_not_forwarded_is_entered_again_by_fallback_restart(backend: &impl Backend) {
    let (_a, b) =
        cut_over(backend, || Handover::new().fallback(Fallback::Restart), "order", &["c"]).await;
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["Size?"], "entered again from its first step");
    assert_eq!(outcomes(&b), [HandoverOutcome::Restarted(FallbackReason::NotForwarded)]);
    b.provider.say("c", "L");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["Size?", "How many?"], "and it goes on on b");
}

async fn fallback_notify_replies_the_handover_notify_message(backend: &impl Backend) {
    const TEXT: &str = "We lost track of that, sorry: please start over.";
    let handover = || Handover::new().fallback(Fallback::Notify).notify_message(TEXT);
    let (_a, b) = cut_over(backend, handover, "help", &["c"]).await;
    b.provider.say("c", "printer");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [TEXT], "the override, not the localized text");
    assert_eq!(outcomes(&b), [HandoverOutcome::Notified(FallbackReason::Conversation)]);
}

async fn a_custom_fallback_returning_false_lets_the_message_route_and_says_not_consumed(
    backend: &impl Backend,
) {
    let declines = || {
        Handover::new().fallback(Fallback::custom(|_info, _ctx| async { Ok::<_, BotError>(false) }))
    };
    let (_a, b) = cut_over(backend, declines, "help", &["c", "d"]).await;
    b.provider.say("c", "printer");
    b.provider.say("d", "help");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["echo printer"], "the handlers ran");
    assert_eq!(b.provider.texts_to("d"), ["What went wrong?"], "a trigger started its flow");
    let custom = HandoverOutcome::Custom { reason: FallbackReason::Conversation, consumed: false };
    assert_eq!(outcomes(&b), [custom, custom]);
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "c's stub is cleared"
    );
}

async fn the_stub_a_conversation_leaves_is_cleared_when_it_ends_normally(backend: &impl Backend) {
    let store = backend.store();
    let bot = |b: BotBuilder| {
        echo(b.handover(Handover::new().fallback(Fallback::Notify)).flow(order()))
            .conversation(support())
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "help");
    a.provider.say("d", "order");
    a.provider.settled(&a.bot).await;
    let stub = |chat| {
        let store = Arc::clone(&store);
        async move { store.get_checkpoint(&format!("test:{chat}")).await.unwrap().map(|c| c.data) }
    };
    assert!(stub("c").await.unwrap().contains(r#""stub":"conversation""#));
    assert!(stub("d").await.unwrap().contains(r#""stub":"not-forwarded""#));
    for (chat, text) in [("c", "printer"), ("d", "M"), ("d", "2")] {
        a.provider.say(chat, text);
        a.provider.settled(&a.bot).await;
    }
    assert_eq!(a.provider.texts_to("c"), ["What went wrong?", "Noted: printer"]);
    assert_eq!(a.provider.texts_to("d"), ["Size?", "How many?", "2 x M"]);
    assert_eq!(stub("c").await, None, "the conversation's stub is gone with it");
    assert_eq!(stub("d").await, None, "the flow's stub is gone with it");
}

async fn a_plain_flow_lost_on_another_replica_routes_the_message_there_as_a_new_one(
    backend: &impl Backend,
) {
    // The default hand-over: nothing is written for a flow without `.persistent()`.
    let bot = |b: BotBuilder| echo(b.flow(order()));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "nothing written");
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["echo M"], "routed as a new message");
    assert!(outcomes(&b).is_empty(), "nothing was handed over: {:?}", outcomes(&b));
    // The replica holding the flow in memory finds the chat moved on and drops its copy.
    a.provider.say("c", "2");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?", "echo 2"], "not \"2 x M\" from a stale copy");
    assert_eq!(outcomes(&a), [HandoverOutcome::Dropped]);
}

/// `menu` goes to `slow_order`, whose first step works for `work` before the flow asks.
fn menu_and_slow_order(work: Duration) -> impl FnOnce(BotBuilder) -> BotBuilder {
    let menu = Flow::new("menu").trigger(Trigger::keyword("menu")).persistent().do_step(
        "route",
        |c| async move {
            let choice = c.ask("1 to order").await?;
            if choice.body == "1" {
                return Ok(c.goto("slow_order"));
            }
            Ok::<_, BotError>(Step::End)
        },
    );
    let slow_order = Flow::new("slow_order")
        .persistent()
        .do_step("prepare", move |c| async move {
            c.sleep(work).await;
            Ok::<_, BotError>(Step::Next)
        })
        .ask(Ask::new("size", "Size?"))
        .do_step("done", |c| async move {
            let size: String = c.get("size").unwrap();
            c.send(format!("one {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        });
    move |b| b.flow(menu).flow(slow_order)
}

async fn goto_runs_the_next_flow_under_the_same_turn_and_it_continues_on_another_replica(
    backend: &impl Backend,
) {
    let work = Duration::from_secs(2);
    let a = replica(backend, "a", TestProvider::new(), |c| c, menu_and_slow_order(work)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, menu_and_slow_order(work)).await;
    a.provider.say("c", "menu");
    a.provider.settled(&a.bot).await;
    let t0 = Instant::now();
    a.provider.say("c", "1");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Comes while `slow_order` works on a, entered by the goto.
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert!(t0.elapsed() >= work, "b waited for the flow a went to: {:?}", t0.elapsed());
    assert_eq!(a.provider.texts_to("c"), ["1 to order", "Size?"]);
    // Had the turn been given up at the goto, b would have run `prepare` again and asked.
    assert_eq!(b.provider.texts_to("c"), ["one M"], "M answered the question a parked on");
    assert!(outcomes(&b).contains(&HandoverOutcome::Continued));
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
}

const IDLE: Duration = Duration::from_secs(2);

type Fences = Arc<Mutex<Vec<Option<u64>>>>;

/// Asks, with the idle watchdog armed; nudges once on silence. Records the turn's fence when it
/// starts and when the watchdog wakes it.
fn nudge(fences: &Fences) -> Conversation {
    let fences = Arc::clone(fences);
    Conversation::new("nudge", move |c| {
        let fences = Arc::clone(&fences);
        async move {
            fences.lock().unwrap().push(c.fence());
            c.idle(IDLE);
            match c.ask("Your email?").await {
                Ok(m) => {
                    c.reply(format!("got {}", m.body)).await?;
                }
                Err(e) if e.is_idle() => {
                    fences.lock().unwrap().push(c.fence());
                    c.send("Still there?").await?;
                }
                Err(e) => return Err(e),
            }
            Ok::<_, BotError>(())
        }
    })
    .trigger(Trigger::keyword("email"))
}

async fn the_idle_watchdog_acts_under_a_turn_of_its_own(backend: &impl Backend) {
    let fences: Fences = Arc::default();
    let conversation = nudge(&fences);
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, |b| b.conversation(conversation)).await;
    a.provider.say("c", "email");
    a.provider.settled(&a.bot).await;
    tokio::time::timeout(IDLE * 5, a.provider.wait_sent(2)).await.unwrap();
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Your email?", "Still there?"]);
    let fences = fences.lock().unwrap().clone();
    match fences[..] {
        [Some(first), Some(woken)] => {
            assert!(woken > first, "the watchdog took a turn of its own: {fences:?}");
        }
        _ => panic!("both ran under a turn: {fences:?}"),
    }
    assert!(a.rec.errors().is_empty(), "{:?}", a.rec.errors());
}

async fn a_stale_copy_s_idle_watchdog_waits_for_the_turn_and_is_dropped_without_a_word(
    backend: &impl Backend,
) {
    let fences: Fences = Arc::default();
    let conversation = nudge(&fences);
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, |b| b.conversation(conversation)).await;
    let slow = |b: BotBuilder| {
        b.on_message(|ctx| async move {
            // Holds the chat's turn across the moment a's watchdog comes due.
            tokio::time::sleep(IDLE * 2).await;
            ctx.reply(format!("b did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    };
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow).await;
    a.provider.say("c", "email");
    a.provider.settled(&a.bot).await;
    tokio::time::sleep(IDLE / 4).await;
    b.provider.say("c", "slow");
    b.provider.settled(&b.bot).await;
    // a's watchdog came due while b held the turn; it got the turn after b, and found the chat
    // had moved on.
    tokio::time::sleep(IDLE).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["b did slow"]);
    assert_eq!(a.provider.texts_to("c"), ["Your email?"], "no nudge from the stale copy");
    assert_eq!(outcomes(&a), [HandoverOutcome::Dropped]);
}

/// A persistent sign-up flow: a name, an age, then thanks.
fn signup() -> Flow {
    Flow::new("signup")
        .trigger(Trigger::keyword("signup"))
        .persistent()
        .ask(Ask::new("name", "Name?"))
        .ask(Ask::new("age", "Age?"))
        .do_step("done", |c| async move {
            let name: String = c.get("name").unwrap_or_default();
            let age: String = c.get("age").unwrap_or_default();
            c.send(format!("Thanks {name}, {age}")).await?;
            Ok::<_, BotError>(Step::End)
        })
}

/// How each of `r`'s conversations ended.
fn ended(r: &Replica) -> Vec<EndReason> {
    r.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConversationEnded { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

/// A checkpoint write that returns an error (the store answered, and failed; not a write that
/// hangs) ends the conversation on that replica as a lost turn does: its copy in memory is
/// gone, the store's checkpoint stays for whoever holds the chat next, and the message whose
/// effect it was to store is handed back, so the next holder handles it first, from that
/// checkpoint, and then the user's next message in its place.
async fn a_checkpoint_write_that_fails_ends_the_conversation_like_a_lost_turn(
    backend: &impl Backend,
) {
    let store = Arc::new(FaultyStore::new(backend.store()));
    let durable = |b: BotBuilder| {
        b.durability(Durability::new().replay_every(Duration::from_millis(100))).flow(signup())
    };
    let a_store = Arc::clone(&store);
    let a = replica(
        backend,
        "a",
        TestProvider::new(),
        |c| c,
        move |b| durable(b).store(a_store as Arc<dyn Store>),
    )
    .await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, durable).await;
    a.provider.say("c", "signup");
    a.provider.settled(&a.bot).await;
    store.fail_checkpoint_writes(1);
    a.provider.say("c", "Ada");
    a.provider.settled(&a.bot).await;
    assert_eq!(ended(&a), [EndReason::Suspended], "a's copy ended, as under a lost turn");
    let failures: Vec<Option<ErrorKind>> =
        a.rec.errors().iter().map(|e| e.as_contract().map(Error::kind)).collect();
    assert_eq!(failures, [Some(ErrorKind::Store)], "the failed write is reported");
    // Ids of its own: each test provider numbers its messages from one.
    assert!(b.provider.inject(Inbound::text("test", "b1", "c", "36")));
    b.provider.settled(&b.bot).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.provider.settled(&a.bot).await;
    b.provider.settled(&b.bot).await;
    let all = [a.provider.texts_to("c"), b.provider.texts_to("c")].concat();
    assert_eq!(
        all.iter().filter(|t| t.starts_with("Thanks")).collect::<Vec<_>>(),
        ["Thanks Ada, 36"],
        "the handed-back answer and the next message each on their question: {all:?}"
    );
    assert_eq!(all.iter().filter(|t| *t == "Name?").count(), 1, "{all:?}");
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "all acknowledged"
    );
}

/// A wait's timeout starts again on the replica that takes the chat over: the flow waited for
/// a size for most of its timeout on a, then the chat moved to b with an answer that is not a
/// size, and b asked again. The timeout fires on b a whole timeout after b's question, and a,
/// whose own timer comes due first, says nothing.
async fn a_wait_s_timeout_restarts_on_the_replica_that_takes_the_chat_over(backend: &impl Backend) {
    // Long enough beside a real Redis round trip and a loaded machine's scheduling that the
    // two deadlines, a's and b's, stay well apart.
    const TIMEOUT: Duration = Duration::from_secs(4);
    const TIMED_OUT: &str = "This conversation timed out. Send a message to start again.";
    let flow = || {
        Flow::new("order")
            .trigger(Trigger::keyword("order"))
            .persistent()
            .timeout(TIMEOUT)
            .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
            .do_step("done", |c| async move {
                let size: String = c.get("size").unwrap_or_default();
                c.send(format!("One {size}")).await?;
                Ok::<_, BotError>(Step::End)
            })
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(flow())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, |b| b.flow(flow())).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    let asked_on_a = Instant::now();
    tokio::time::sleep(TIMEOUT * 5 / 8).await;
    // Taken before the message goes in: b asks no earlier, so a timeout measured from here
    // that fires early fired early however long settling took.
    let asked_on_b = Instant::now();
    // Ids of its own: each test provider numbers its messages from one.
    assert!(b.provider.inject(Inbound::text("test", "b1", "c", "XL")));
    b.provider.settled(&b.bot).await;
    let b_asked = b.provider.texts_to("c");
    assert_eq!(b_asked, ["Please answer with one of: S, M, L"], "b asked again");
    // a's deadline passes: nothing times out, on either replica.
    tokio::time::sleep_until(asked_on_a + TIMEOUT + TIMEOUT / 4).await;
    a.provider.settled(&a.bot).await;
    let said = |r: &Replica| r.provider.texts_to("c").iter().filter(|t| *t == TIMED_OUT).count();
    assert_eq!((said(&a), said(&b)), (0, 0), "no timeout a whole timeout after a asked");
    // b's own deadline: a whole timeout after b asked.
    let fired = tokio::time::timeout(TIMEOUT * 2, async {
        while said(&b) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(fired.await.is_ok(), "b's timeout never fired");
    let after = asked_on_b.elapsed();
    assert!(after >= TIMEOUT, "b's timeout fired {after:?} after b asked, before its time");
    assert_eq!((said(&a), said(&b)), (0, 1), "one timeout, from b");
    assert!(ended(&b).contains(&EndReason::Timeout), "{:?}", ended(&b));
}

/// What a handler's calls return once Redis is gone.
#[derive(Debug, Default)]
struct Seen {
    store: Option<ErrorKind>,
    send: Option<(ErrorKind, bool)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_a_handler_s_store_call_fails_as_store_and_its_send_as_lease_lost() {
    let server = Arc::new(Mutex::new(RedisServer::start().unwrap()));
    let options = {
        let s = server.lock().unwrap();
        // Replies must fail well within a third of the lease for the stall rule to be timely.
        RedisOptions::new(&s.url(), "down")
            .response_timeout(Duration::from_millis(250))
            .connection_timeout(Duration::from_millis(250))
    };
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(options.clone()).await.unwrap());
    let coordinator = RedisCoordinator::connect(options).await.unwrap().with_lease(LEASE);
    let coordination = CoordinationConfig::new(coordinator)
        .turn_wait(Duration::from_secs(3))
        .settle(Duration::from_secs(60))
        .build();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let (record, redis) = (Arc::clone(&seen), Arc::clone(&server));
    let bot = rec
        .attach(Bot::builder().provider(provider.clone()).store(store).coordination(coordination))
        .on_message(move |ctx| {
            let (record, redis) = (Arc::clone(&record), Arc::clone(&redis));
            async move {
                redis.lock().unwrap().kill();
                let stored = ctx.set_user(&serde_json::json!({ "seen": true })).await;
                record.lock().unwrap().store =
                    stored.err().and_then(|e| e.as_contract().map(Error::kind));
                // Past the stall rule: no renewal for two thirds of the lease.
                tokio::time::sleep(LEASE).await;
                let sent = ctx.reply("still here?").await;
                record.lock().unwrap().send = sent.err().and_then(|e| {
                    e.as_contract().map(|c| {
                        let stalled =
                            matches!(c, Error::LeaseLost { reason: LeaseLostReason::Stalled, .. });
                        (c.kind(), stalled)
                    })
                });
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "go");
    provider.settled(&bot).await;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.store, Some(ErrorKind::Store), "the store call: {seen:?}");
    assert_eq!(seen.send, Some((ErrorKind::LeaseLost, true)), "the send: {seen:?}");
    assert!(provider.sent().is_empty(), "nothing went out without a turn");
    // A message arriving now cannot get a turn at all: refused to a webhook's sender, and
    // reported for its chat when it came from the transport.
    let refused = bot.accept(Inbound::text("test", "w1", "d", "hello")).await.unwrap_err();
    assert_eq!(refused.as_contract().map(Error::kind), Some(ErrorKind::CoordinationUnavailable));
    provider.say("e", "hello");
    provider.settled(&bot).await;
    let reported: Vec<Option<ErrorKind>> = rec
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Error { key: Some(key), error, .. } if key.as_str() == "test:e" => {
                Some(error.as_contract().map(Error::kind))
            }
            _ => None,
        })
        .collect();
    assert_eq!(reported, [Some(ErrorKind::CoordinationUnavailable)]);
    assert!(provider.sent().is_empty());
}
