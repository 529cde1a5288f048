//! What reaches a running bot from Meta's webhook besides the users' messages, through
//! signed posts against the Graph API stand-in of `botmesh-testing`: receipts (only a `failed`
//! status is a failed delivery), WhatsApp's calls, the business's own messages echoed back and
//! notices about the account (never a user's message), Messenger's and Instagram's echoes and
//! receipts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::{Bot, BotError, Content, DeliveryStatus, Event};
use botmesh_meta::{Channel, MetaProvider};
use botmesh_testing::meta::GraphServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const WITHIN: Duration = Duration::from_secs(30);
const PATH: &str = "/meta/whatsapp";

async fn graph() -> GraphServer {
    GraphServer::builder()
        .app_secret("app-secret")
        .verify_token("verify-me")
        .access_token("graph-token")
        .start()
        .await
        .unwrap()
}

fn provider(server: &GraphServer, channel: Channel) -> MetaProvider {
    MetaProvider::new(channel, "graph-token", "app-secret", "verify-me")
        .unwrap()
        .with_api_url(server.api_url())
}

fn whatsapp(server: &GraphServer) -> MetaProvider {
    provider(server, Channel::WhatsApp { phone_number_id: server.phone_number_id().to_owned() })
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

/// What a running bot was told: each receipt (message id, status) and each message it handled
/// (chat, id, content), in order.
#[derive(Default)]
struct Told {
    receipts: Mutex<Vec<(String, DeliveryStatus)>>,
    messages: Mutex<Vec<(String, String, Content)>>,
}

impl Told {
    fn receipts(&self) -> Vec<(String, DeliveryStatus)> {
        self.receipts.lock().unwrap().clone()
    }

    fn messages(&self) -> Vec<(String, String, Content)> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until the bot was told of a receipt for `message` and handled a message with
    /// `message`'s id too, each the last of its kind the test sent: everything before them was
    /// told already.
    async fn settled(&self, receipt: &str, message: &str) {
        let deadline = Instant::now() + WITHIN;
        loop {
            let receipted = self.receipts().iter().any(|(id, _)| id == receipt);
            let handled = self.messages().iter().any(|(_, id, _)| id == message);
            if receipted && handled {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "told {:?} and {:?}, waiting for {receipt} and {message}",
                self.receipts(),
                self.messages()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A bot on `providers` that writes down what it is told.
fn recording(providers: &[&MetaProvider], told: &Arc<Told>) -> Bot {
    let (receipts, messages) = (Arc::clone(told), Arc::clone(told));
    let mut builder = Bot::builder();
    for provider in providers {
        builder = builder.provider((*provider).clone());
    }
    builder
        .on(move |e| {
            if let Event::Delivery { delivery, .. } = e {
                let receipt = (delivery.message.as_str().to_owned(), delivery.status);
                receipts.receipts.lock().unwrap().push(receipt);
            }
        })
        .on_message(move |ctx| {
            let told = Arc::clone(&messages);
            async move {
                let m = ctx.message();
                let seen = (m.chat().as_str().to_owned(), m.id().as_str().to_owned());
                told.messages.lock().unwrap().push((seen.0, seen.1, m.content().clone()));
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap()
}

/// Posts `body` to `url`, signed with the app secret, as Meta does.
async fn post_signed(server: &GraphServer, url: &str, body: &serde_json::Value) -> Option<u16> {
    let body = body.to_string();
    let signature = server.sign(body.as_bytes());
    server.post_raw(url, body, Some(&signature)).await
}

/// A WhatsApp webhook body of the stand-in's number: one change per `(field, value)`.
fn whatsapp_body(server: &GraphServer, changes: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let changes: Vec<serde_json::Value> = changes
        .iter()
        .map(|(field, value)| {
            let mut value = value.clone();
            value["messaging_product"] = "whatsapp".into();
            value["metadata"] = serde_json::json!({
                "display_phone_number": server.display_phone_number(),
                "phone_number_id": server.phone_number_id(),
            });
            serde_json::json!({"field": field, "value": value})
        })
        .collect();
    serde_json::json!({"object": "whatsapp_business_account", "entry": [{"id": server.waba_id(), "changes": changes}]})
}

/// The last change of each WhatsApp test: a real failed delivery and a user's text, so that
/// the bot was told of everything before once it was told of these.
fn whatsapp_last(user: &str) -> (&'static str, serde_json::Value) {
    (
        "messages",
        serde_json::json!({
            "contacts": [{"wa_id": user, "profile": {"name": "Ana"}}],
            "statuses": [{"id": "wamid.last-failed", "status": "failed", "timestamp": "9", "recipient_id": user,
                "errors": [{"code": 131026, "title": "Message Undeliverable", "message": "Message Undeliverable",
                    "error_data": {"details": "Message Undeliverable."}}]}],
            "messages": [{"from": user, "id": "wamid.last-text", "timestamp": "9", "type": "text", "text": {"body": "done"}}],
        }),
    )
}

fn kinds(messages: &[(String, String, Content)]) -> Vec<&str> {
    messages
        .iter()
        .map(|(_, _, content)| match content {
            Content::Unsupported { kind, .. } => kind.as_str(),
            other => other.type_name(),
        })
        .collect()
}

#[tokio::test]
async fn a_played_voice_note_is_a_read_receipt_and_only_a_failed_status_is_a_failed_delivery() {
    let server = graph().await;
    let provider = whatsapp(&server);
    let told = Arc::new(Told::default());
    let bot = recording(&[&provider], &told);
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    let status = |id: &str, status: &str| serde_json::json!({"id": id, "status": status, "timestamp": "2", "recipient_id": "34600"});
    let statuses = serde_json::json!({"statuses": [
        status("wamid.sent", "sent"),
        status("wamid.delivered", "delivered"),
        status("wamid.read", "read"),
        status("wamid.voice", "played"),
        status("wamid.later", "a_status_of_tomorrow"),
    ]});
    let body = whatsapp_body(&server, &[("messages", statuses), whatsapp_last("34600")]);
    assert_eq!(post_signed(&server, &url, &body).await, Some(200));
    told.settled("wamid.last-failed", "wamid.last-text").await;
    let receipts = told.receipts();
    let expected = [
        ("wamid.sent", DeliveryStatus::Sent),
        ("wamid.delivered", DeliveryStatus::Delivered),
        ("wamid.read", DeliveryStatus::Read),
        ("wamid.voice", DeliveryStatus::Read),
        ("wamid.last-failed", DeliveryStatus::Failed),
    ]
    .map(|(id, status)| (id.to_owned(), status));
    assert_eq!(
        receipts, expected,
        "only the failed status is a failure; a status unknown yet is none"
    );
    assert_eq!(kinds(&told.messages()), ["text"], "a receipt is never a message");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn calls_and_call_statuses_under_the_calls_field_are_never_deliveries() {
    let server = graph().await;
    let provider = whatsapp(&server);
    let told = Arc::new(Told::default());
    let bot = recording(&[&provider], &told);
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    let business = server.display_phone_number().to_owned();
    let call_status = |status: &str| serde_json::json!({"id": "wacid.out", "type": "call", "status": status, "timestamp": "3", "recipient_id": "34601"});
    let calls = serde_json::json!({
        "contacts": [{"wa_id": "34601", "profile": {"name": "Ana"}}],
        "statuses": [call_status("RINGING"), call_status("ACCEPTED"), call_status("REJECTED")],
        "calls": [
            {"id": "wacid.in", "from": "34601", "to": business, "event": "connect", "timestamp": "4",
             "direction": "USER_INITIATED", "session": {"sdp_type": "offer", "sdp": "v=0"}},
            {"id": "wacid.in", "from": "34601", "to": business, "event": "terminate", "timestamp": "5",
             "direction": "USER_INITIATED", "status": "FAILED", "duration": 0},
        ],
    });
    let body = whatsapp_body(&server, &[("calls", calls), whatsapp_last("34601")]);
    assert_eq!(post_signed(&server, &url, &body).await, Some(200));
    told.settled("wamid.last-failed", "wamid.last-text").await;
    let receipts = told.receipts();
    assert_eq!(
        receipts,
        [("wamid.last-failed".to_owned(), DeliveryStatus::Failed)],
        "a call's status is no delivery"
    );
    let messages = told.messages();
    assert_eq!(
        kinds(&messages),
        ["call", "call", "call_status", "call_status", "call_status", "text"]
    );
    assert!(
        messages.iter().all(|(chat, _, _)| chat == "34601"),
        "in the user's chat: {messages:?}"
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn echoes_history_and_account_updates_are_never_user_messages() {
    let server = graph().await;
    let provider = whatsapp(&server);
    let told = Arc::new(Told::default());
    let bot = recording(&[&provider], &told);
    bot.start().await.unwrap();
    let (url, _serving) = serve(&provider).await;
    let business = server.display_phone_number().to_owned();
    let echo = serde_json::json!({"from": business, "to": "34602", "id": "wamid.echo", "timestamp": "6",
        "type": "text", "text": {"body": "sent from the business app"}});
    let old = serde_json::json!({"from": "34602", "id": "wamid.old", "timestamp": "1", "type": "text",
        "text": {"body": "from last year"}, "history_context": {"status": "READ"}});
    let body = whatsapp_body(
        &server,
        &[
            ("smb_message_echoes", serde_json::json!({"message_echoes": [echo.clone()]})),
            ("message_echoes", serde_json::json!({"message_echoes": [echo]})),
            (
                "history",
                serde_json::json!({"history": [{"metadata": {"phase": 0, "chunk_order": 1, "progress": 100},
            "threads": [{"id": "34602", "messages": [old]}]}]}),
            ),
            (
                "message_template_status_update",
                serde_json::json!({"event": "APPROVED",
            "message_template_id": 1, "message_template_name": "order_update", "message_template_language": "en_US"}),
            ),
            ("account_update", serde_json::json!({"event": "VERIFIED_ACCOUNT"})),
            (
                "user_preferences",
                serde_json::json!({"user_preferences": [{"wa_id": "34602",
            "detail": "User requested to stop marketing messages", "category": "marketing_messages",
            "value": "stop", "timestamp": 7}]}),
            ),
            whatsapp_last("34602"),
        ],
    );
    assert_eq!(post_signed(&server, &url, &body).await, Some(200));
    told.settled("wamid.last-failed", "wamid.last-text").await;
    let ids: Vec<String> = told.messages().into_iter().map(|(_, id, _)| id).collect();
    assert_eq!(ids, ["wamid.last-text"], "the business's own messages are not the user's");
    assert_eq!(told.receipts().len(), 1, "{:?}", told.receipts());
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn messenger_and_instagram_echoes_and_receipts_are_never_messages_nor_failures() {
    let server = graph().await;
    let page = server.page_id().to_owned();
    let ig = server.instagram_id().to_owned();
    let messenger = provider(&server, Channel::Messenger { page_id: page.clone() });
    let instagram = provider(&server, Channel::Instagram { account_id: ig.clone() });
    let told = Arc::new(Told::default());
    let bot = recording(&[&messenger, &instagram], &told);
    bot.start().await.unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = messenger.router("/messenger").merge(instagram.router("/instagram"));
    tokio::spawn(async move { botmesh_traits::webhook::axum::serve(listener, app).await });

    let at = 1_700_000_000_000_u64;
    let body = serde_json::json!({"object": "page", "entry": [{"id": page, "time": at, "messaging": [
        {"sender": {"id": page}, "recipient": {"id": "psid-1"}, "timestamp": at,
         "message": {"mid": "m_echo", "text": "sent from the page", "is_echo": true, "app_id": 1}},
        {"sender": {"id": "psid-1"}, "recipient": {"id": page}, "timestamp": at + 1,
         "delivery": {"mids": ["m_sent"], "watermark": at}},
        {"sender": {"id": "psid-1"}, "recipient": {"id": page}, "timestamp": at + 2,
         "read": {"watermark": at}},
        {"sender": {"id": "psid-1"}, "recipient": {"id": page}, "timestamp": at + 3,
         "message": {"mid": "m_done", "text": "done"}},
    ]}]});
    let url = format!("{base}/messenger");
    assert_eq!(post_signed(&server, &url, &body).await, Some(200));
    told.settled("", "m_done").await;

    let body = serde_json::json!({"object": "instagram", "entry": [{"id": ig, "time": at, "messaging": [
        {"sender": {"id": ig}, "recipient": {"id": "igsid-1"}, "timestamp": at,
         "message": {"mid": "ig_echo", "text": "sent from the app", "is_echo": true}},
        {"sender": {"id": "igsid-1"}, "recipient": {"id": ig}, "timestamp": at + 1,
         "read": {"mid": "ig_sent"}},
        {"sender": {"id": "igsid-1"}, "recipient": {"id": ig}, "timestamp": at + 2,
         "message": {"mid": "ig_gone", "is_deleted": true}},
        {"sender": {"id": "igsid-1"}, "recipient": {"id": ig}, "timestamp": at + 3,
         "message": {"mid": "ig_done", "text": "done"}},
    ]}]});
    let url = format!("{base}/instagram");
    assert_eq!(post_signed(&server, &url, &body).await, Some(200));
    told.settled("ig_sent", "ig_done").await;

    let expected = [
        ("m_sent", DeliveryStatus::Delivered),
        ("", DeliveryStatus::Read),
        ("ig_sent", DeliveryStatus::Read),
    ]
    .map(|(id, status)| (id.to_owned(), status));
    assert_eq!(told.receipts(), expected, "an Instagram read names the message read");
    let messages = told.messages();
    let ids: Vec<&str> = messages.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(kinds(&messages), ["text", "message_deleted", "text"], "{messages:?}");
    assert_ne!(ids[1], "ig_gone", "a deletion is not the message it deletes: {ids:?}");
    bot.stop().await.unwrap();
}
