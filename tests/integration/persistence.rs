//! Persistent flows: checkpoints, a restarted bot continuing, the parked-answer rule, and
//! corrupt checkpoints.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::traits::{CheckpointWrite, JournalStore, Store};
use botmesh_core::{Ask, BotError, Durability, EndReason, Event, Flow, MemoryStore, Step, Trigger};
use botmesh_testing::{FaultyStore, TestProvider};
use serde_json::json;

use crate::support::{Recorder, builder};

fn flow() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .persistent()
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .do_step("extras", |c| async move {
            let gift = c.ask("Gift wrap?").await?;
            let note = c.ask("A note?").await?;
            let size: String = c.get("size").unwrap();
            c.send(format!("{size}, gift {}, note {}", gift.body, note.body)).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

async fn bot_on(store: Arc<dyn Store>) -> (botmesh_core::Bot, TestProvider, Recorder) {
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let bot = rec
        .attach(botmesh_core::Bot::builder().provider(provider.clone()).store(store).flow(flow()))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec)
}

#[tokio::test]
async fn a_persistent_flow_survives_a_new_bot_on_the_same_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot_on(Arc::clone(&store)).await;
    p1.say("c", "order");
    p1.settled(&first).await;
    first.stop().await.unwrap();
    assert!(
        store.get_checkpoint("test:c").await.unwrap().is_some(),
        "the checkpoint outlives the bot"
    );

    // A new process: the answer to the parked question continues the flow.
    let (second, p2, rec) = bot_on(Arc::clone(&store)).await;
    p2.say("c", "L");
    p2.say("c", "yes");
    p2.say("c", "happy birthday");
    p2.settled(&second).await;
    assert_eq!(p2.texts_to("c"), ["Gift wrap?", "A note?", "L, gift yes, note happy birthday"]);
    assert!(
        rec.events().iter().any(|e| matches!(e, Event::ConversationStarted { resumed: true, .. }))
    );
    assert_eq!(
        store.get_checkpoint("test:c").await.unwrap(),
        None,
        "a finished flow clears its checkpoint"
    );
}

#[tokio::test]
async fn a_flow_parked_on_its_step_s_first_question_takes_the_next_message_as_the_answer() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot_on(Arc::clone(&store)).await;
    for t in ["order", "M"] {
        p1.say("c", t);
    }
    p1.settled(&first).await;
    assert_eq!(p1.texts_to("c"), ["Size?", "Gift wrap?"]);
    first.stop().await.unwrap();

    let (second, p2, _) = bot_on(Arc::clone(&store)).await;
    p2.say("c", "no");
    p2.settled(&second).await;
    // "no" answered "Gift wrap?" without it being asked again.
    assert_eq!(p2.texts_to("c"), ["A note?"]);
}

#[tokio::test]
async fn a_flow_parked_on_a_later_question_keeps_its_first_answer_for_the_step_run_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot_on(Arc::clone(&store)).await;
    for t in ["order", "M", "yes"] {
        p1.say("c", t);
    }
    p1.settled(&first).await;
    assert_eq!(p1.texts_to("c").last().unwrap(), "A note?");
    first.stop().await.unwrap();

    let (second, p2, _) = bot_on(Arc::clone(&store)).await;
    p2.say("c", "with love");
    p2.settled(&second).await;
    // The step runs again from the state it began with (size M), fed its recorded first answer
    // ("yes") instead of asking again; the waking message answers the next question.
    assert_eq!(p2.texts_to("c"), ["M, gift yes, note with love"]);
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_reported_and_the_conversation_resets() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    store.set_checkpoint("test:c", &CheckpointWrite::new("{not json")).await.unwrap();
    store
        .set_checkpoint(
            "test:d",
            &CheckpointWrite::new(
                json!({"v": 1, "flow": "gone", "step": 0, "question": 0, "state": {}}).to_string(),
            ),
        )
        .await
        .unwrap();
    let (bot, provider, rec) = bot_on(Arc::clone(&store)).await;
    provider.say("c", "order");
    provider.say("d", "hello");
    provider.settled(&bot).await;
    let corrupt =
        rec.errors().iter().filter(|e| matches!(&***e, BotError::CorruptCheckpoint { .. })).count();
    assert_eq!(corrupt, 2);
    // The message routes as a new one: "order" starts the flow afresh.
    assert_eq!(provider.texts_to("c"), ["Size?"]);
    assert!(provider.texts_to("d").is_empty());
    assert_eq!(
        store.get_checkpoint("test:d").await.unwrap(),
        None,
        "the unreadable row is cleared"
    );
}

#[tokio::test]
async fn user_data_is_kept_in_the_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (b, provider, _) = builder();
    let bot = b
        .store(Arc::clone(&store))
        .on_message(|ctx| async move {
            let mut user = ctx.user().await?;
            let n = user["visits"].as_u64().unwrap_or(0) + 1;
            user["visits"] = json!(n);
            ctx.set_user(&user).await?;
            ctx.reply(format!("visit {n}")).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "hi");
    provider.say("c", "hi");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["visit 1", "visit 2"]);
    assert_eq!(store.get_user_data("test:c").await.unwrap().as_deref(), Some(r#"{"visits":2}"#));
}

#[tokio::test]
async fn stopping_keeps_a_waiting_persistent_flow_s_checkpoint() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (bot, provider, rec) = bot_on(Arc::clone(&store)).await;
    provider.say("c", "order");
    provider.settled(&bot).await;
    bot.stop().await.unwrap();
    assert!(
        rec.events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Stopped, .. }))
    );
    assert!(store.get_checkpoint("test:c").await.unwrap().is_some());
}

/// A second process on `store` (wrapped so its checkpoint reads can fail), with a handler for
/// messages no conversation takes, after a first one parked the flow on "Size?".
async fn parked_then_faulty(
    durable: bool,
) -> (botmesh_core::Bot, TestProvider, Recorder, Arc<FaultyStore>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (first, p1, _) = bot_on(Arc::clone(&store)).await;
    p1.say("c", "order");
    p1.settled(&first).await;
    first.stop().await.unwrap();

    let faulty = Arc::new(FaultyStore::new(store));
    let provider = TestProvider::new();
    let rec = Recorder::default();
    let mut b = botmesh_core::Bot::builder()
        .provider(provider.clone())
        .store(Arc::clone(&faulty) as Arc<dyn Store>)
        .flow(flow())
        .on_message(|ctx| async move {
            ctx.reply(format!("new message {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        });
    if durable {
        b = b.durability(Durability::new());
    }
    let bot = rec.attach(b).build().unwrap();
    bot.start().await.unwrap();
    (bot, provider, rec, faulty)
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_checkpoint_cannot_be_read_is_not_routed_as_a_new_message() {
    let (bot, provider, rec, store) = parked_then_faulty(false).await;
    store.fail_checkpoint_reads(1);
    provider.say("c", "L");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), Vec::<String>::new(), "no handler took the answer");
    assert_eq!(rec.errors().len(), 1, "the failed read is reported: {:?}", rec.errors());

    // The store is back: the flow is still parked on its question and takes the answer.
    provider.say("c", "L");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Gift wrap?"]);
    bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_durability_an_answer_whose_checkpoint_cannot_be_read_stays_journaled_and_runs_again()
{
    let (bot, provider, rec, store) = parked_then_faulty(true).await;
    store.fail_checkpoint_reads(1);
    provider.say("c", "L");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), Vec::<String>::new(), "no handler took the answer");
    assert_eq!(rec.errors().len(), 1, "the failed read is reported: {:?}", rec.errors());
    let pending = store.inbox_pending(10).await.unwrap();
    assert_eq!(pending.len(), 1, "handed back, not acknowledged");

    // One process replays what its journal holds when it starts again.
    bot.stop().await.unwrap();
    bot.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Gift wrap?"], "replayed, it reached the flow");
    bot.stop().await.unwrap();
}
