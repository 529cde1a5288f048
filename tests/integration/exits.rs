//! A user can always get out: cancel words end a waiting conversation, and interrupting
//! triggers start another one over it (setting it aside when it asked for it), on one process
//! and across replicas.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh_core::texts::keys;
use botmesh_core::traits::Store;
use botmesh_core::{
    Ask, Bot, BotBuilder, BotError, Conversation, EndReason, Event, Flow, Step, Trigger,
};
use botmesh_testing::TestProvider;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{Replica, replica};
use crate::support::{Recorder, builder};

on_both_backends!(
    a_cancel_word_from_the_other_replica_ends_the_flow_there_and_nothing_of_it_is_left,
    a_cancel_word_from_the_other_replica_ends_a_do_step_parked_on_a_later_question,
    a_cancel_word_from_the_other_replica_sent_during_a_sleep_ends_the_flow_when_its_turn_comes,
    a_cancel_word_from_the_other_replica_clears_the_stub_of_a_conversation_that_lives_elsewhere,
    an_interrupting_trigger_from_the_other_replica_ends_the_old_flow_once_and_starts_the_new_one,
    a_flow_set_aside_by_an_interruption_resumes_on_whichever_replica_the_interruption_ends,
);

const CANCELLED: &str = "Cancelled. Send a message whenever you want to start again.";

/// A persistent order flow: a size, then a quantity, with a one-minute timeout.
fn order() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .persistent()
        .timeout(Duration::from_secs(60))
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"))
        .do_step("done", |c| async move {
            let (size, qty): (String, String) =
                (c.get("size").unwrap_or_default(), c.get("qty").unwrap_or_default());
            c.send(format!("{qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

/// A `do` step of three questions that works for five seconds after the first answer.
fn form() -> Flow {
    Flow::new("form").trigger(Trigger::keyword("form")).persistent().do_step(
        "fill",
        |c| async move {
            let a = c.ask("Q0?").await?;
            c.sleep(Duration::from_secs(5)).await;
            let b = c.ask("Q1?").await?;
            let d = c.ask("Q2?").await?;
            c.send(format!("{} {} {}", a.body, b.body, d.body)).await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

/// A reminder flow that waits for a number of seconds, rejecting anything else.
fn remind() -> Flow {
    Flow::new("remind").trigger(Trigger::keyword("remind")).persistent().ask(
        Ask::new("secs", "In how many seconds?").validate(|m| {
            m.body
                .trim()
                .parse::<u64>()
                .map(serde_json::Value::from)
                .map_err(|_| "Please send a number of seconds.".to_owned())
        }),
    )
}

fn echo(b: BotBuilder) -> BotBuilder {
    b.on_message(|ctx| async move {
        ctx.reply(format!("echo {}", ctx.body())).await?;
        Ok::<_, BotError>(())
    })
}

fn cancellable(b: BotBuilder) -> BotBuilder {
    echo(b.cancel_on(Trigger::text(keys::CANCEL_WORDS)))
}

fn ended(rec: &Recorder, reason: EndReason) -> Vec<String> {
    rec.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConversationEnded { name, reason: r, .. } if r == reason => Some(name),
            _ => None,
        })
        .collect()
}

async fn single(
    flow: Flow,
    extra: impl FnOnce(BotBuilder) -> BotBuilder,
) -> (Bot, TestProvider, Recorder, Arc<botmesh_core::MemoryStore>) {
    let (b, provider, rec) = builder();
    let store = Arc::new(botmesh_core::MemoryStore::new());
    let bot = extra(cancellable(b.store(store.clone()).flow(flow))).build().unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec, store)
}

/// After a cancel: no checkpoint, no timer fires, and the next message routes as new.
async fn nothing_left(bot: &Bot, provider: &TestProvider, store: &dyn Store, texts: &[&str]) {
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "no checkpoint left");
    tokio::time::sleep(Duration::from_secs(120)).await;
    provider.say("c", "M");
    provider.settled(bot).await;
    let mut expected: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
    expected.push("echo M".to_owned());
    assert_eq!(provider.texts_to("c"), expected, "no timeout fired; M routed as new");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_word_ends_a_flow_parked_on_its_first_question() {
    let (bot, provider, rec, store) = single(order(), |b| b).await;
    provider.say("c", "order");
    provider.say("c", "Cancel");
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Cancelled), ["order"]);
    nothing_left(&bot, &provider, &*store, &["Size?", CANCELLED]).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_word_ends_a_do_step_parked_on_a_later_question() {
    let (bot, provider, rec, store) = single(form(), |b| b).await;
    for t in ["form", "a", "b", "/cancel"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Cancelled), ["form"]);
    nothing_left(&bot, &provider, &*store, &["Q0?", "Q1?", "Q2?", CANCELLED]).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_word_sent_during_a_sleep_ends_the_flow_when_its_turn_comes() {
    let (bot, provider, rec, store) = single(form(), |b| b).await;
    provider.say("c", "form");
    provider.say("c", "a");
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The step sleeps, holding the chat's turn: the cancel is handled right after it.
    provider.say("c", "stop");
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Cancelled), ["form"]);
    nothing_left(&bot, &provider, &*store, &["Q0?", "Q1?", CANCELLED]).await;
}

#[tokio::test(start_paused = true)]
async fn hooks_run_before_the_cancel_and_a_validator_never_sees_a_cancel_word() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    let flow = Flow::new("age").trigger(Trigger::keyword("age")).persistent().ask(
        Ask::new("age", "How old?").validate(move |m| {
            counted.fetch_add(1, Ordering::SeqCst);
            m.body.parse::<u32>().map(serde_json::Value::from).map_err(|_| String::new())
        }),
    );
    let transcribe = |b: BotBuilder| {
        b.before_message(|mut m| async move {
            if let Some(words) = m.body.strip_prefix("voice:") {
                let words = words.to_owned();
                m.set_body(words).set_kind("voice-transcript");
            }
            Ok::<_, BotError>(m)
        })
    };
    let (bot, provider, rec, _) = single(flow, transcribe).await;
    provider.say("c", "age");
    provider.say("c", "voice:cancel");
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Cancelled), ["age"], "the transcript cancelled");
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the validator never saw it");
    assert_eq!(provider.texts_to("c"), ["How old?", CANCELLED]);
}

#[tokio::test(start_paused = true)]
async fn a_flow_s_own_cancel_word_and_a_silent_cancel() {
    let flow = remind().cancel_on(Trigger::keyword("nevermind"));
    let (b, provider, rec) = builder();
    let bot = echo(b.flow(flow)).text("en", keys::CANCELLED, "").build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "remind");
    provider.say("c", "stop");
    provider.settled(&bot).await;
    assert!(ended(&rec, EndReason::Cancelled).is_empty(), "no bot-wide cancel words here");
    provider.say("c", "nevermind");
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Cancelled), ["remind"]);
    assert_eq!(
        provider.texts_to("c"),
        ["In how many seconds?", "Please send a number of seconds."],
        "an empty cancelled text sends nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupting_trigger_ends_the_waiting_flow_and_a_plain_one_is_an_answer() {
    let help = Conversation::new("help", |c| async move {
        c.send("Helping.").await?;
        Ok::<_, BotError>(())
    })
    .trigger(Trigger::keyword("help"));
    let (bot, provider, rec, store) =
        single(remind(), |b| b.flow(order().interrupts(true)).conversation(help)).await;
    provider.say("c", "remind");
    provider.say("c", "help");
    provider.settled(&bot).await;
    assert_eq!(
        provider.texts_to("c").last().map(String::as_str),
        Some("Please send a number of seconds."),
        "a trigger that does not interrupt is an answer"
    );
    provider.say("c", "order");
    provider.say("c", "M");
    provider.say("c", "2");
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Interrupted), ["remind"]);
    assert_eq!(
        provider.texts_to("c"),
        ["In how many seconds?", "Please send a number of seconds.", "Size?", "How many?", "2 x M"]
    );
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_persistent_flow_set_aside_by_an_interruption_resumes_after_it_completes() {
    let quiz = Flow::new("quiz")
        .trigger(Trigger::keyword("quiz"))
        .persistent()
        .resume_after_interruption()
        .ask(Ask::new("name", "Name?"))
        .ask(Ask::new("color", "Color?"))
        .do_step("done", |c| async move {
            let (n, col): (String, String) =
                (c.get("name").unwrap_or_default(), c.get("color").unwrap_or_default());
            c.send(format!("{n} likes {col}")).await?;
            Ok::<_, BotError>(Step::Next)
        });
    let (bot, provider, rec, store) = single(quiz, |b| b.flow(order().interrupts(true))).await;
    for t in ["quiz", "Ann", "order", "L", "1"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(ended(&rec, EndReason::Interrupted), ["quiz"]);
    assert_eq!(
        provider.texts_to("c"),
        ["Name?", "Color?", "Size?", "How many?", "1 x L", "Color?"],
        "the quiz asks its question again once the order is placed"
    );
    provider.say("c", "green");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c").last().map(String::as_str), Some("Ann likes green"));
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None);
    assert_eq!(store.get_checkpoint("test:c|aside").await.unwrap(), None, "nothing left aside");
}

#[tokio::test(start_paused = true)]
async fn a_flow_set_aside_is_forgotten_when_the_interruption_is_cancelled() {
    let quiz = Flow::new("quiz")
        .trigger(Trigger::keyword("quiz"))
        .persistent()
        .resume_after_interruption()
        .ask(Ask::new("name", "Name?"));
    let (bot, provider, _, store) = single(quiz, |b| b.flow(order().interrupts(true))).await;
    for t in ["quiz", "order", "cancel"] {
        provider.say("c", t);
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Name?", "Size?", CANCELLED]);
    assert_eq!(store.get_checkpoint("test:c|aside").await.unwrap(), None);
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None);
}

fn events_of(replicas: &[&Replica], reason: EndReason) -> usize {
    replicas.iter().map(|r| ended(&r.rec, reason).len()).sum()
}

async fn a_cancel_word_from_the_other_replica_ends_the_flow_there_and_nothing_of_it_is_left(
    backend: &impl Backend,
) {
    // Its timeout is short, so the copy left in a's memory comes due within the test.
    let bot = |b: BotBuilder| cancellable(b.flow(order().timeout(Duration::from_secs(2))));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "cancel");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [CANCELLED]);
    assert_eq!(events_of(&[&a, &b], EndReason::Cancelled), 1);
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
    // a's copy in memory is stale: its timeout acts under a turn and finds that out.
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.provider.say("c", "M");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?", "echo M"], "M routed as new, no timeout text");
}

async fn an_interrupting_trigger_from_the_other_replica_ends_the_old_flow_once_and_starts_the_new_one(
    backend: &impl Backend,
) {
    let bot = |b: BotBuilder| echo(b.flow(remind()).flow(order().interrupts(true)));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "remind");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "order");
    b.provider.settled(&b.bot).await;
    a.provider.say("c", "S");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "3");
    b.provider.settled(&b.bot).await;
    assert_eq!(events_of(&[&a, &b], EndReason::Interrupted), 1, "ended once");
    assert_eq!(a.provider.texts_to("c"), ["In how many seconds?", "How many?"]);
    assert_eq!(b.provider.texts_to("c"), ["Size?", "3 x S"], "the new flow went on, in order");
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
}

async fn a_flow_set_aside_by_an_interruption_resumes_on_whichever_replica_the_interruption_ends(
    backend: &impl Backend,
) {
    let quiz = || {
        Flow::new("quiz")
            .trigger(Trigger::keyword("quiz"))
            .persistent()
            .resume_after_interruption()
            .ask(Ask::new("name", "Name?"))
            .ask(Ask::new("color", "Color?"))
            .do_step("done", |c| async move {
                let (n, col): (String, String) =
                    (c.get("name").unwrap_or_default(), c.get("color").unwrap_or_default());
                c.send(format!("{n} likes {col}")).await?;
                Ok::<_, BotError>(Step::Next)
            })
    };
    let bot = move |b: BotBuilder| b.flow(quiz()).flow(order().interrupts(true));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    for t in ["quiz", "Ann", "order"] {
        a.provider.say("c", t);
        a.provider.settled(&a.bot).await;
    }
    for t in ["M", "2"] {
        b.provider.say("c", t);
        b.provider.settled(&b.bot).await;
    }
    assert_eq!(b.provider.texts_to("c"), ["How many?", "2 x M", "Color?"], "b resumed the quiz");
    a.provider.say("c", "red");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c").last().map(String::as_str), Some("Ann likes red"));
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
    assert_eq!(backend.store().get_checkpoint("test:c|aside").await.unwrap(), None);
}

/// Two replicas running `flow`; a gets `at_a` (settling after each), then b gets `cancel`.
async fn cancelled_from_b(
    backend: &impl Backend,
    flow: fn() -> Flow,
    at_a: &[&str],
    pause_before_cancel: Option<Duration>,
) -> (Replica, Replica) {
    let bot = move |b: BotBuilder| cancellable(b.flow(flow()));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    for t in at_a {
        a.provider.say("c", t);
        if pause_before_cancel.is_none() {
            a.provider.settled(&a.bot).await;
        }
    }
    if let Some(pause) = pause_before_cancel {
        tokio::time::sleep(pause).await;
    }
    b.provider.say("c", "cancel");
    b.provider.settled(&b.bot).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(b.provider.texts_to("c"), [CANCELLED]);
    assert_eq!(events_of(&[&a, &b], EndReason::Cancelled), 1, "ended once");
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "no checkpoint left");
    (a, b)
}

async fn a_cancel_word_from_the_other_replica_ends_a_do_step_parked_on_a_later_question(
    backend: &impl Backend,
) {
    let (a, _) = cancelled_from_b(backend, form, &["form", "x", "y"], None).await;
    assert_eq!(a.provider.texts_to("c"), ["Q0?", "Q1?", "Q2?"]);
    a.provider.say("c", "z");
    a.provider.settled(&a.bot).await;
    assert_eq!(
        a.provider.texts_to("c").last().map(String::as_str),
        Some("echo z"),
        "routed as new"
    );
}

async fn a_cancel_word_from_the_other_replica_sent_during_a_sleep_ends_the_flow_when_its_turn_comes(
    backend: &impl Backend,
) {
    // a's step sleeps five seconds after the first answer, holding the chat's turn: b's cancel
    // waits for it, then finds the flow parked on the next question.
    let (a, _) =
        cancelled_from_b(backend, form, &["form", "x"], Some(Duration::from_millis(500))).await;
    assert_eq!(a.provider.texts_to("c"), ["Q0?", "Q1?"]);
}

async fn a_cancel_word_from_the_other_replica_clears_the_stub_of_a_conversation_that_lives_elsewhere(
    backend: &impl Backend,
) {
    let support = || {
        Conversation::new("support", |c| async move {
            let problem = c.ask("What went wrong?").await?;
            c.send(format!("Noted: {}", problem.body)).await?;
            Ok::<_, BotError>(())
        })
        .trigger(Trigger::keyword("help"))
        .timeout(Duration::from_secs(2))
    };
    let bot = move |b: BotBuilder| {
        cancellable(b.conversation(support()))
            .handover(botmesh_core::Handover::new().fallback(botmesh_core::Fallback::Notify))
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "help");
    a.provider.settled(&a.bot).await;
    assert!(backend.store().get_checkpoint("test:c").await.unwrap().is_some(), "a left a stub");
    b.provider.say("c", "stop");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [CANCELLED], "no interruption notice: it was cancelled");
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "the stub is gone");
    assert_eq!(events_of(&[&a, &b], EndReason::Cancelled), 1);
    // a's copy in memory times out under a turn, finds itself stale, and says nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["What went wrong?"]);
}
