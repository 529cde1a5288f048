//! A `do` step with several questions, interrupted on any of them (a restart, a hand-over to
//! another replica) and resumed from its checkpoint: every answer lands on the question it
//! answered.

use std::sync::Arc;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{CheckpointWrite, Store};
use botmesh_core::{
    Bot, BotBuilder, BotError, Durability, Event, Flow, Inbound, MemoryStore, MessageId, Step,
    Trigger,
};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};

use crate::support::Recorder;

/// A persistent flow whose `do` step asks `n` questions, keeps each answer in the state, and
/// says at the end which answer it stored for which question.
fn form(n: usize) -> Flow {
    Flow::new("form").trigger(Trigger::keyword("form")).persistent().do_step(
        "fill",
        move |c| async move {
            for q in 0..n {
                let answer = c.ask(format!("Q{q}?")).await?;
                c.set(&format!("q{q}"), answer.body.clone())?;
            }
            let stored: Vec<String> = (0..n)
                .map(|q| format!("q{q}={}", c.get::<String>(&format!("q{q}")).unwrap_or_default()))
                .collect();
            c.send(stored.join(" ")).await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

/// What the form says at the end when question `q` was answered `a{q}`.
fn summary(n: usize) -> String {
    (0..n).map(|q| format!("q{q}=a{q}")).collect::<Vec<_>>().join(" ")
}

fn say(provider: &TestProvider, id: &str, text: &str) {
    provider.inject(Inbound::text("test", MessageId::from(id), "c", text));
}

/// A bot on `store` running `form(n)`, optionally as a replica on `hub`, with durability.
async fn bot(
    store: &Arc<MemoryStore>,
    n: usize,
    replica: Option<(&MemoryCoordinationHub, &str)>,
    durable: bool,
) -> (Bot, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let mut b: BotBuilder =
        rec.attach(Bot::builder().provider(provider.clone()).store(store.clone()).flow(form(n)));
    if let Some((hub, id)) = replica {
        let coordinator = MemoryCoordinator::new(hub.clone(), id);
        b = b.coordination(CoordinationConfig::new(coordinator).build());
    }
    if durable {
        b = b.durability(Durability::new());
    }
    let bot = b.build().unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec)
}

/// Starts the form on a first process, answers `parked` questions there, and stops it; a
/// second process on the same store gets the remaining answers.
async fn across_a_restart(n: usize, parked: usize, durable: bool) {
    let store = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot(&store, n, None, durable).await;
    say(&p1, "start", "form");
    for q in 0..parked {
        say(&p1, &format!("m{q}"), &format!("a{q}"));
    }
    p1.settled(&first).await;
    assert_eq!(p1.texts_to("c").last().map(String::as_str), Some(&*format!("Q{parked}?")));
    first.stop().await.unwrap();

    let (second, p2, rec) = bot(&store, n, None, durable).await;
    for q in parked..n {
        say(&p2, &format!("m{q}"), &format!("a{q}"));
    }
    p2.settled(&second).await;
    let mut expected: Vec<String> = (parked + 1..n).map(|q| format!("Q{q}?")).collect();
    expected.push(summary(n));
    assert_eq!(p2.texts_to("c"), expected, "{n} questions, parked on Q{parked}, durable {durable}");
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "the flow ended");
}

/// Replica `a` starts the form and takes `parked` answers; the rest reach replica `b`.
async fn across_a_handover(n: usize, parked: usize, durable: bool) {
    let store = Arc::new(MemoryStore::new());
    let hub = MemoryCoordinationHub::new();
    let (a, pa, _) = bot(&store, n, Some((&hub, "a")), durable).await;
    let (b, pb, rec) = bot(&store, n, Some((&hub, "b")), durable).await;
    say(&pa, "start", "form");
    for q in 0..parked {
        say(&pa, &format!("m{q}"), &format!("a{q}"));
    }
    pa.settled(&a).await;
    for q in parked..n {
        say(&pb, &format!("m{q}"), &format!("a{q}"));
        pb.settled(&b).await;
    }
    let mut expected: Vec<String> = (parked + 1..n).map(|q| format!("Q{q}?")).collect();
    expected.push(summary(n));
    assert_eq!(pb.texts_to("c"), expected, "{n} questions, parked on Q{parked}, durable {durable}");
    assert!(rec.errors().is_empty(), "{:?}", rec.errors());
    assert!(
        rec.events().iter().any(|e| matches!(e, Event::ConversationStarted { resumed: true, .. }))
    );
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "the flow ended");
}

#[tokio::test(start_paused = true)]
async fn a_step_of_two_three_or_four_questions_resumes_after_a_restart_on_the_question_it_was_parked_on()
 {
    for durable in [false, true] {
        for n in 2..=4 {
            for parked in 0..n {
                across_a_restart(n, parked, durable).await;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_step_of_two_three_or_four_questions_resumes_on_another_replica_on_the_question_it_was_parked_on()
 {
    for durable in [false, true] {
        for n in 2..=4 {
            for parked in 0..n {
                across_a_handover(n, parked, durable).await;
            }
        }
    }
}

/// Parks `form(n)` on question `parked` in a first process and stops it.
async fn parked_form(store: &Arc<MemoryStore>, n: usize, parked: usize) {
    let (first, p1, _) = bot(store, n, None, false).await;
    say(&p1, "start", "form");
    for q in 0..parked {
        say(&p1, &format!("m{q}"), &format!("a{q}"));
    }
    p1.settled(&first).await;
    first.stop().await.unwrap();
}

/// A bot on `store` running `flow` instead of the form.
async fn bot_with(store: &Arc<MemoryStore>, flow: Flow) -> (Bot, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let bot = rec
        .attach(Bot::builder().provider(provider.clone()).store(store.clone()).flow(flow))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec)
}

fn diverged(rec: &Recorder) -> bool {
    rec.errors().iter().any(|e| matches!(&**e, BotError::ReplayDiverged { step: 0, .. }))
}

#[tokio::test(start_paused = true)]
async fn recorded_answers_of_a_changed_flow_are_not_replayed_and_the_step_asks_again() {
    let store = Arc::new(MemoryStore::new());
    parked_form(&store, 3, 2).await;
    // The same flow with its step renamed: another fingerprint.
    let changed = Flow::new("form").persistent().do_step("fill-in", |c| async move {
        let one = c.ask("Q0?").await?;
        c.send(format!("got {}", one.body)).await?;
        Ok::<_, BotError>(Step::Next)
    });
    let (bot, provider, _) = bot_with(&store, changed).await;
    say(&provider, "m2", "late");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Q0?"], "the step runs again from its start");
}

#[tokio::test(start_paused = true)]
async fn a_resumed_step_that_waits_elsewhere_than_where_it_was_parked_runs_again_from_its_start() {
    let store = Arc::new(MemoryStore::new());
    parked_form(&store, 3, 1).await;
    // Same shape, but the second input is now a bare wait, not question 1.
    let changed = Flow::new("form").persistent().do_step("fill", |c| async move {
        let one = c.ask("Q0?").await?;
        let two = c.wait().await?;
        c.send(format!("{} {}", one.body, two.body)).await?;
        Ok::<_, BotError>(Step::Next)
    });
    let (bot, provider, rec) = bot_with(&store, changed).await;
    say(&provider, "m1", "late");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Q0?"], "asked again; 'late' answers nothing");
    assert!(diverged(&rec), "the restart is reported");
    say(&provider, "m2", "x");
    say(&provider, "m3", "y");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Q0?", "x y"]);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_step_that_ends_before_using_its_recorded_answers_stands_and_is_reported() {
    let store = Arc::new(MemoryStore::new());
    parked_form(&store, 4, 3).await;
    // The step now asks two questions only: it finishes on the first two recorded answers.
    let (bot, provider, rec) = bot(&store, 2, None, false).await;
    say(&provider, "m3", "late");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["q0=a0 q1=a1"], "what it did is not done twice");
    assert!(diverged(&rec), "the unused answers are reported");
    assert_eq!(store.get_checkpoint("test:c").await.unwrap(), None, "the flow went on and ended");
}

#[tokio::test(start_paused = true)]
async fn an_answer_too_large_to_embed_makes_the_resumed_step_start_again() {
    let store = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot(&store, 3, None, false).await;
    say(&p1, "start", "form");
    say(&p1, "m0", "a0");
    say(&p1, "m1", &"z".repeat(20 * 1024));
    p1.settled(&first).await;
    first.stop().await.unwrap();
    let doc = store.get_checkpoint("test:c").await.unwrap().unwrap();
    assert!(doc.data.contains(r#""unrecorded":true"#), "{}", doc.data);

    let (second, p2, _) = bot(&store, 3, None, false).await;
    say(&p2, "m2", "a2");
    p2.settled(&second).await;
    assert_eq!(p2.texts_to("c"), ["Q0?"], "the recorded answers cannot be replayed faithfully");
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_with_only_a_first_answer_from_an_earlier_version_still_resumes() {
    let store = Arc::new(MemoryStore::new());
    let message =
        serde_json::to_value(botmesh_core::Message::new(Inbound::text("test", "m0", "c", "a0")))
            .unwrap();
    let doc = serde_json::json!({
        "v": 1, "flow": "form", "step": 0, "question": 1, "state": {},
        "answer": { "form": "embedded", "message": message },
    });
    store.set_checkpoint("test:c", &CheckpointWrite::new(doc.to_string())).await.unwrap();
    let (bot, provider, _) = bot(&store, 2, None, false).await;
    say(&provider, "m1", "a1");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), [summary(2)]);
}
