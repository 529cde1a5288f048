//! `MetaProvider` against the Graph API stand-in of `botmesh-testing`: signatures, the
//! handshake, batches, three replicas behind Meta's retries with one killed, the 24-hour
//! window, an expired token, and the provider conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::Coordination;
use botmesh_core::traits::{Provider, Store};
use botmesh_core::{
    Bot, BotBuilder, BotError, Durability, Error, Event, MemoryStore, Outbound, OutboundContent,
};
use botmesh_meta::{Channel, MetaProvider};
use botmesh_testing::meta::{Channel as Meta, Fault, GraphServer};
use botmesh_testing::{
    MemoryCoordinationHub, MemoryCoordinator, ProviderHarness, provider_conformance,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(1);
const WITHIN: Duration = Duration::from_secs(30);
const PATH: &str = "/meta/whatsapp";

async fn graph() -> GraphServer {
    GraphServer::builder()
        .app_secret("app-secret")
        .verify_token("verify-me")
        .access_token("graph-token")
        .webhook_retry(Duration::from_millis(20), Duration::from_millis(300))
        .start()
        .await
        .unwrap()
}

fn whatsapp(server: &GraphServer) -> MetaProvider {
    let channel = Channel::WhatsApp { phone_number_id: server.phone_number_id().to_owned() };
    MetaProvider::new(channel, "graph-token", "app-secret", "verify-me")
        .unwrap()
        .with_api_url(server.api_url())
}

/// Serves `provider`'s endpoint on a free port: its URL, and the task serving it.
async fn serve(provider: &MetaProvider) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let url = format!("http://{}{PATH}", listener.local_addr().unwrap());
    let router = provider.router(PATH);
    let task = tokio::spawn(async move {
        let _ = botmesh_traits::webhook::axum::serve(listener, router).await;
    });
    (url, task)
}

/// An echo bot counting, per message body, how often it was handled.
fn echo(builder: BotBuilder, seen: &Arc<Mutex<HashMap<String, usize>>>) -> BotBuilder {
    let seen = Arc::clone(seen);
    builder.on_message(move |ctx| {
        let seen = Arc::clone(&seen);
        async move {
            *seen.lock().unwrap().entry(ctx.body().to_owned()).or_default() += 1;
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        }
    })
}

async fn wait_texts(server: &GraphServer, to: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let texts = server.sent_texts(Meta::WhatsApp, to);
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "{to} got {texts:?}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn signatures_are_checked_and_the_handshake_echoes_the_challenge_for_our_token_only() {
    let server = graph().await;
    let provider = whatsapp(&server);
    let errors = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&errors);
    let bot = echo(Bot::builder().provider(provider.clone()), &Arc::default())
        .on(move |e| {
            if matches!(e, Event::Error { .. }) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    assert!(server.verify(&url).await, "the handshake echoes the challenge");
    assert!(!server.verify_with(&url, "not-ours").await, "a wrong verify token is refused");

    server.open_window("34600");
    let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "messages": [{"from": "34600", "id": "wamid.sig", "timestamp": "1", "type": "text", "text": {"body": "signed"}}],
    }}]}]})
    .to_string();
    let good = server.sign(body.as_bytes());
    let tampered = body.replace("signed", "forged");
    assert_eq!(server.post_raw(&url, body.clone(), None).await, Some(401), "missing");
    assert_eq!(server.post_raw(&url, body.clone(), Some("sha256=00")).await, Some(401), "invalid");
    assert_eq!(server.post_raw(&url, tampered, Some(&good)).await, Some(401), "modified body");
    assert!(server.sent_texts(Meta::WhatsApp, "34600").is_empty(), "nothing unsigned went in");
    let before = errors.load(Ordering::SeqCst);
    let broken = b"{\"object\": [".to_vec();
    let signed = server.sign(&broken);
    assert_eq!(server.post_raw(&url, broken, Some(&signed)).await, Some(400), "malformed");
    assert!(errors.load(Ordering::SeqCst) > before, "a malformed body is an error event");
    assert_eq!(server.post_raw(&url, body, Some(&good)).await, Some(200), "valid");
    assert_eq!(wait_texts(&server, "34600", 1).await, ["echo signed"]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_of_several_users_is_acknowledged_once_all_are_taken_and_handled_in_order() {
    use botmesh_testing::meta::Inbound as Said;
    let server = graph().await;
    let provider = whatsapp(&server);
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let bot = echo(Bot::builder().provider(provider.clone()), &seen).build().unwrap();
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    server.subscribe(&url);
    server.deliver_batch([
        Said::text(Meta::WhatsApp, "111", "a1"),
        Said::text(Meta::WhatsApp, "222", "b1"),
        Said::text(Meta::WhatsApp, "111", "a2"),
    ]);
    assert_eq!(wait_texts(&server, "111", 2).await, ["echo a1", "echo a2"]);
    assert_eq!(wait_texts(&server, "222", 1).await, ["echo b1"]);
    let deliveries = server.deliveries();
    assert_eq!(deliveries.len(), 1, "one body");
    assert_eq!((deliveries[0].status, deliveries[0].message_ids.len()), (Some(200), 3));
    bot.stop().await.unwrap();
}

fn replica(
    hub: &MemoryCoordinationHub,
    id: &str,
) -> (Arc<MemoryCoordinator>, Arc<dyn Coordination>) {
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
    let coordination = CoordinationConfig::new(Arc::clone(&coordinator))
        .settle(Duration::from_secs(2))
        .turn_wait(Duration::from_secs(20))
        .build();
    (coordinator, coordination)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_meta_s_retries_lose_nothing_and_handle_each_message_once_in_order_when_one_is_killed()
 {
    let server = graph().await;
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let provider = whatsapp(&server);
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(provider.clone())
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &seen).build().unwrap();
        bot.start().await.unwrap();
        let (url, serving) = serve(&provider).await;
        server.subscribe(&url);
        replicas.push((coordinator, bot, serving));
    }
    let chats: Vec<String> = (0..50).map(|i| format!("3460{i:04}")).collect();
    for round in 0..20 {
        if round == 8 {
            // Killed: its endpoint goes away and its leases stop being renewed.
            replicas[1].2.abort();
            replicas[1].0.crash();
        }
        for chat in &chats {
            server.whatsapp_text(chat, &format!("{chat}-{round}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for chat in &chats {
        let texts = wait_texts(&server, chat, 20).await;
        let expected: Vec<String> = (0..20).map(|r| format!("echo {chat}-{r}")).collect();
        assert_eq!(texts, expected, "chat {chat}: every message answered once, in order");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1000, "none lost");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    let refused = server.deliveries().iter().filter(|d| d.status != Some(200)).count();
    assert!(refused > 0, "the dead replica's deliveries failed and were retried elsewhere");
    for (i, (_, bot, _)) in replicas.iter().enumerate() {
        if i != 1 {
            bot.stop().await.unwrap();
        }
    }
}

#[tokio::test]
async fn outside_the_24_hour_window_only_a_template_goes_out_and_an_expired_token_closes_the_transport()
 {
    let server = graph().await;
    let provider = whatsapp(&server);
    let bot = Bot::builder().provider(provider.clone()).build().unwrap();
    bot.start().await.unwrap();
    server.outside_window("34999");
    let refused = bot.send(&Outbound::text("34999", "hello again")).await.unwrap_err();
    assert!(
        matches!(refused.as_contract(), Some(Error::WindowClosed { chat, .. }) if chat == "34999")
    );
    let template = OutboundContent::Template {
        name: "order_update".into(),
        language: "en_US".into(),
        params: vec!["Ana".into()],
    };
    let receipt = bot.send(&Outbound::new("34999", template)).await.unwrap();
    assert!(receipt.id.is_some_and(|id| id.as_str().starts_with("wamid.")));
    server.expire_token();
    server.open_window("34999");
    let expired = bot.send(&Outbound::text("34999", "hi")).await.unwrap_err();
    assert!(matches!(expired.as_contract(), Some(Error::Unauthorized { .. })));
    assert_eq!(provider.status(), botmesh_core::TransportStatus::Closed);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_photo_s_bytes_are_fetched_through_the_media_endpoint() {
    let server = graph().await;
    let provider = whatsapp(&server);
    let bot = Bot::builder()
        .provider(provider.clone())
        .on_message(|ctx| async move {
            let bytes = ctx.media().await?;
            ctx.reply(format!("{} bytes", bytes.len())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    server.subscribe(&url);
    server.send_media(Meta::WhatsApp, "34777", "image", vec![9u8; 321], "image/png", None);
    assert_eq!(wait_texts(&server, "34777", 1).await, ["321 bytes"]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn messenger_and_instagram_answer_on_their_own_channels_in_one_bot() {
    let server = graph().await;
    let provider = |channel| {
        MetaProvider::new(channel, "graph-token", "app-secret", "verify-me")
            .unwrap()
            .with_api_url(server.api_url())
    };
    let messenger = provider(Channel::Messenger { page_id: server.page_id().to_owned() });
    let instagram = provider(Channel::Instagram { account_id: server.instagram_id().to_owned() });
    let bot = echo(
        Bot::builder().provider(messenger.clone()).provider(instagram.clone()),
        &Arc::default(),
    )
    .build()
    .unwrap();
    bot.start().await.unwrap();
    // One server, each channel at its own path; the stand-in posts every body to each
    // subscriber in turn, and the channel whose body it is not answers 400, so subscribe
    // one at a time.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = messenger.router("/messenger").merge(instagram.router("/instagram"));
    tokio::spawn(async move { botmesh_traits::webhook::axum::serve(listener, app).await });
    server.subscribe(format!("{base}/messenger"));
    server.messenger_text("psid-1", "from messenger");
    let sent = server.wait_for_sent(Meta::Messenger, "psid-1", 1, WITHIN).await;
    assert_eq!(sent[0].text.as_deref(), Some("echo from messenger"));
    assert!(server.unsubscribe(&format!("{base}/messenger")));
    server.subscribe(format!("{base}/instagram"));
    server.instagram_text("igsid-1", "from instagram");
    let sent = server.wait_for_sent(Meta::Instagram, "igsid-1", 1, WITHIN).await;
    assert_eq!(sent[0].text.as_deref(), Some("echo from instagram"));
    bot.stop().await.unwrap();
}

// --- The conformance suite -------------------------------------------------------------------

struct Harness {
    server: GraphServer,
    routers: Mutex<Vec<(Arc<dyn Provider>, String)>>,
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        let provider = whatsapp(&self.server);
        let (url, _serving) = serve(&provider).await;
        let provider: Arc<dyn Provider> = Arc::new(provider);
        self.routers.lock().unwrap().push((Arc::clone(&provider), url));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        let url = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, u)| u.clone()).unwrap()
        };
        let wa_id = self.chat_id(chat);
        let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "messages": [{"from": wa_id, "id": format!("wamid.{id}"), "timestamp": "1", "type": "text", "text": {"body": text}}],
        }}]}]})
        .to_string();
        let signature = self.server.sign(body.as_bytes());
        self.server.post_raw(&url, body, Some(&signature)).await
    }

    fn chat_id(&self, name: &str) -> String {
        // WhatsApp ids are digits; the user wrote, so the window is open.
        let digits: String = name.bytes().map(|b| char::from(b'0' + b % 10)).take(15).collect();
        self.server.open_window(&digits);
        digits
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.server.sent_texts(Meta::WhatsApp, &self.chat_id(chat))
    }

    async fn throttle_next_send(&self, _retry_after: Duration) {
        self.server.fail_next(Meta::WhatsApp, Fault::TooManyRequests);
    }

    async fn malformed(&self, to: &Arc<dyn Provider>) -> Option<u16> {
        let url = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, u)| u.clone()).unwrap()
        };
        let body = b"{\"entry\": [".to_vec();
        let signature = self.server.sign(&body);
        self.server.post_raw(&url, body, Some(&signature)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_passes_the_provider_conformance_suite() {
    let harness = Harness { server: graph().await, routers: Mutex::default() };
    let hub = MemoryCoordinationHub::new();
    provider_conformance(&harness, move |id| replica(&hub, id).1).await;
}
