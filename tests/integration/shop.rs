//! The shop example, driven as a user would.

use botmesh_core::{Bot, Inbound};
use botmesh_testing::TestProvider;

#[tokio::test]
async fn the_shop_takes_an_order_end_to_end() {
    let provider = TestProvider::new();
    let bot = shop::bot(Bot::builder().provider(provider.clone())).build().unwrap();
    bot.start().await.unwrap();
    for t in ["hello", "order", "XL", "M", "zero", "2", "maybe", "yes"] {
        provider.say("u", t);
    }
    provider.settled(&bot).await;
    let texts = provider.texts_to("u");
    assert!(texts[0].starts_with("Hi!"));
    assert_eq!(
        texts.last().unwrap(),
        "Order placed: 2 x M for $24. That's order #1 for you. Thanks!"
    );
    assert!(texts.contains(&"Please send a number from 1 to 10.".to_owned()));
    assert!(texts.contains(&"Please answer yes or no.".to_owned()));
}

#[tokio::test]
async fn the_shop_speaks_spanish_built_in_texts() {
    let provider = TestProvider::new();
    let bot = shop::bot(Bot::builder().provider(provider.clone())).build().unwrap();
    bot.start().await.unwrap();
    provider.inject(Inbound::text("test", "1", "u", "pedido").with_lang("es"));
    provider.inject(Inbound::text("test", "2", "u", "XXL").with_lang("es"));
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("u")[1], "Responde con una de estas opciones: S, M, L");
}

#[tokio::test(start_paused = true)]
async fn the_shop_sends_a_reminder_later() {
    let provider = TestProvider::new();
    let bot = shop::bot(Bot::builder().provider(provider.clone())).build().unwrap();
    bot.start().await.unwrap();
    for t in ["remind", "water the plants", "90"] {
        provider.say("u", t);
    }
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("u").last().unwrap(), "OK, I'll remind you in 90 s.");
    tokio::time::sleep(std::time::Duration::from_secs(91)).await;
    provider.wait_sent(4).await;
    assert_eq!(provider.texts_to("u").last().unwrap(), "Reminder: water the plants");
}

#[tokio::test(start_paused = true)]
async fn in_the_shop_cancel_leaves_a_reminder_and_order_interrupts_one() {
    let provider = TestProvider::new();
    let bot = shop::bot(Bot::builder().provider(provider.clone())).build().unwrap();
    bot.start().await.unwrap();
    for t in ["remind", "stop", "remind", "order", "S", "1", "yes", "remind", "help", "done"] {
        provider.say("u", t);
    }
    provider.settled(&bot).await;
    let texts = provider.texts_to("u");
    assert_eq!(texts[1], "Cancelled. Send a message whenever you want to start again.");
    assert_eq!(texts[3], "Which size would you like? S, M or L", "order interrupted remind");
    assert!(
        texts.contains(&"Order placed: 1 x S for $10. That's order #1 for you. Thanks!".to_owned())
    );
    assert_eq!(texts[texts.len() - 3], "What should I remind you about?");
    assert_eq!(
        texts[texts.len() - 2],
        "Sorry to hear that. What went wrong?",
        "help interrupted it"
    );
    assert!(
        !texts.iter().any(|t| t.starts_with("Please send a number of seconds")),
        "no command was taken for a number of seconds"
    );
}
