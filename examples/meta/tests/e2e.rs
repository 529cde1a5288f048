//! The shop over WhatsApp, end to end against the Graph API stand-in: an order, through the
//! example's own server (health check and webhook).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::time::Duration;

use botmesh_meta::Channel;
use botmesh_testing::meta::{Channel as Meta, GraphServer};
use meta_shop::{Settings, app, bot};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_over_whatsapp_completes_through_the_example_s_server() {
    let server = GraphServer::builder()
        .app_secret("shop-secret")
        .verify_token("shop-verify")
        .start()
        .await
        .unwrap();
    let settings = Settings {
        token: "shop-token".to_owned(),
        app_secret: "shop-secret".to_owned(),
        verify_token: "shop-verify".to_owned(),
        api_url: Some(server.api_url()),
        channels: vec![Channel::WhatsApp { phone_number_id: server.phone_number_id().to_owned() }],
        redis: None,
    };
    let providers = settings.providers().unwrap();
    let shop = bot(&settings, &providers).await.unwrap();
    shop.start().await.unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = app(&providers);
    tokio::spawn(async move { botmesh_traits::webhook::axum::serve(listener, router).await });
    let url = format!("{base}/meta/whatsapp");
    assert!(server.verify(&url).await, "the handshake goes through the example's server");
    server.subscribe(&url);
    let user = "34611111111";
    let mut answers = 0;
    for (line, expected) in [("order", 1), ("M", 2), ("2", 3), ("yes", 4)] {
        server.whatsapp_text(user, line);
        answers = expected;
        server.wait_for_sent(Meta::WhatsApp, user, answers, Duration::from_secs(15)).await;
    }
    let texts = server.sent_texts(Meta::WhatsApp, user);
    assert_eq!(texts.len(), answers);
    assert_eq!(texts[3], "Order placed: 2 x M for $24. That's order #1 for you. Thanks!");
    shop.stop().await.unwrap();
}
