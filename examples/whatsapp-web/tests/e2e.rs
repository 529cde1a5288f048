//! The shop on WhatsApp Web, end to end against the phone network stand-in: the persistent
//! order flow, and an order in progress surviving a restart on the same session without
//! pairing again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::time::Duration;

use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_whatsapp_web::WhatsAppWebProvider;
use whatsapp_web_shop::{Settings, bot};

const ANA: &str = "34600000001";

/// Says each line and waits for the bot's answers to reach `answers` in all.
async fn say(network: &PhoneNetwork, lines: &[(&str, usize)]) -> Vec<String> {
    for (line, answers) in lines {
        network.user_says(ANA, line);
        network.wait_for_sent(&jid(ANA), *answers, Duration::from_secs(15)).await;
    }
    network.sent_texts(&jid(ANA))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_completes_and_survives_a_restart_on_the_same_session() {
    let network = PhoneNetwork::new();
    let temp = std::env::temp_dir().join(format!("botmesh-wa-shop-{}", uuid::Uuid::new_v4()));
    let settings = Settings {
        session_dir: temp.join("session"),
        session_in_store: false,
        pair_phone: None,
        redis: None,
        sqlite: temp.join("shop.db").to_string_lossy().into_owned(),
    };
    std::fs::create_dir_all(&temp).unwrap();
    let provider = || {
        let provider =
            WhatsAppWebProvider::with_connector(&settings.session_dir, network.connector())
                .on_qr(|_| {});
        settings.pairing(provider)
    };
    let shop = bot(&settings, provider()).await.unwrap();
    shop.start().await.unwrap();
    let texts = say(&network, &[("order", 1), ("M", 2), ("2", 3), ("yes", 4)]).await;
    assert_eq!(texts[3], "Order placed: 2 x M for $24. That's order #1 for you. Thanks!");
    say(&network, &[("order", 5), ("L", 6)]).await;
    shop.stop().await.unwrap();
    // A new process on the same store and session picks the order up where it stopped.
    let shop = bot(&settings, provider()).await.unwrap();
    shop.start().await.unwrap();
    let texts = say(&network, &[("3", 7), ("yes", 8)]).await;
    assert_eq!(texts[7], "Order placed: 3 x L for $42. That's order #2 for you. Thanks!");
    assert_eq!(network.codes_shown(), 1, "the restart reused the linked session");
    shop.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&temp);
}
