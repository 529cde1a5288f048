//! [`MapStore`] against botmesh's store conformance suite, and in a bot.

use std::sync::Arc;

use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, ChatId};
use botmesh_testing::{TestProvider, claimed_capabilities, store_conformance};
use custom_store::MapStore;

#[tokio::test]
async fn map_store_passes_the_store_conformance_suite() {
    let store = Arc::new(MapStore::new());
    // The suite checks the required methods, then what the accessors claim: compare-and-set.
    assert_eq!(claimed_capabilities(&*store), ["cas"]);
    assert!(!store.shared());
    store_conformance(store).await;
}

#[tokio::test]
async fn a_bot_keeps_its_state_in_the_map_store() {
    let store = Arc::new(MapStore::new());
    let provider = TestProvider::new();
    let bot = Bot::builder()
        .provider(provider.clone())
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .on_message(|ctx| async move {
            ctx.reply(format!("you said {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("ana", "hello");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("ana"), ["you said hello"]);
    let chat = store.get_chat(&ChatId::from("ana")).await.unwrap();
    assert!(chat.is_some(), "the bot recorded the chat in the store");
    bot.stop().await.unwrap();
}
