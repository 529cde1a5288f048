//! What a message costs the store: a chat changing hands between replicas costs a checkpoint
//! read only when the bot could use what it finds.

use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::{Ask, Bot, BotBuilder, BotError, Flow, Trigger};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};

use crate::support::PlainStore;

/// Two replicas of the bot `with` builds, on one hub and one store; each of ten messages of one
/// chat goes to the replica the previous one did not, so every turn changes hands. Returns the
/// checkpoint reads.
async fn reads_over_ten_hand_offs(with: impl Fn(BotBuilder) -> BotBuilder) -> usize {
    let hub = MemoryCoordinationHub::new();
    let store = Arc::new(PlainStore::shared());
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let provider = TestProvider::new();
        let coordinator =
            MemoryCoordinator::new(hub.clone(), id).with_lease(Duration::from_secs(1));
        let bot = with(Bot::builder())
            .provider(provider.clone())
            .store(store.clone())
            .coordination(CoordinationConfig::new(coordinator).build())
            .on_message(|ctx| async move {
                ctx.reply("ok").await?;
                Ok::<_, BotError>(())
            })
            .build()
            .unwrap();
        bot.start().await.unwrap();
        replicas.push((bot, provider));
    }
    for n in 0..10 {
        let (bot, provider) = &replicas[n % 2];
        provider.say("c", "hello");
        provider.settled(bot).await;
    }
    assert_eq!(replicas.iter().map(|(_, p)| p.sent_count()).sum::<usize>(), 10);
    store.checkpoint_reads()
}

#[tokio::test(start_paused = true)]
async fn a_bot_without_flows_reads_no_checkpoint_when_its_chat_changes_hands() {
    assert_eq!(reads_over_ten_hand_offs(|b| b).await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_bot_with_flows_reads_the_checkpoint_when_its_chat_changes_hands() {
    // A replica that does not forward still resumes a checkpoint another one forwarded, so a
    // hand-off reads it: once per turn that changed hands (the first turn included).
    let flow = Flow::new("order").trigger(Trigger::keyword("order")).ask(Ask::new("size", "Size?"));
    assert_eq!(reads_over_ten_hand_offs(move |b| b.flow(flow.clone())).await, 10);
}
