//! Webhooks set through teloxide, pushed to a small axum receiver.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use teloxide::RequestError;
use teloxide::payloads::{DeleteWebhookSetters, SetWebhookSetters};
use teloxide::requests::Requester;

use super::super::{SECRET_TOKEN_HEADER, TelegramServer};
use super::{SOON, bot};

/// What a receiver saw, and how many of its first answers are 503.
#[derive(Default)]
struct Seen {
    failures_left: usize,
    bodies: Vec<Value>,
    secrets: Vec<Option<String>>,
}

async fn receive(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> StatusCode {
    let mut seen = seen.lock().unwrap();
    seen.secrets
        .push(headers.get(SECRET_TOKEN_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned));
    seen.bodies.push(body);
    if seen.failures_left > 0 {
        seen.failures_left -= 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::OK
}

/// A receiver on a free port answering 503 to its first `failures` pushes.
async fn receiver(failures: usize) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen { failures_left: failures, ..Seen::default() }));
    let app = Router::new().route("/hook", post(receive)).with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test]
async fn updates_are_pushed_in_order_with_the_secret_and_retried_after_a_503() {
    let server = TelegramServer::builder()
        .webhook_retry(Duration::from_millis(20), Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let bot = bot(&server);
    let (url, seen) = receiver(1).await;
    bot.set_webhook(url.parse().unwrap()).secret_token("s3cr-et_").await.unwrap();
    assert_eq!(server.webhook().unwrap().secret_token.as_deref(), Some("s3cr-et_"));

    let first = server.user_says(42, 42, "one");
    let second = server.user_says(42, 42, "two");
    let deliveries = server.wait_for_deliveries(3, SOON).await;
    let summary: Vec<_> =
        deliveries.iter().map(|d| (d.update_id, d.status, d.attempt, d.delivered())).collect();
    assert_eq!(
        summary,
        [(first, Some(503), 1, false), (first, Some(200), 2, true), (second, Some(200), 1, true),]
    );
    assert!(deliveries.iter().all(|d| d.url == url));
    {
        let seen = seen.lock().unwrap();
        let texts: Vec<_> = seen.bodies.iter().map(|b| b["message"]["text"].clone()).collect();
        assert_eq!(texts, ["one", "one", "two"]);
        assert_eq!(seen.bodies[0]["update_id"], first);
        assert!(seen.secrets.iter().all(|s| s.as_deref() == Some("s3cr-et_")));
    }
    assert!(server.pending_updates().is_empty());

    // While the webhook is set, polling is refused.
    let refused = bot.get_updates().await;
    let Err(RequestError::Api(e)) = refused else { panic!("{refused:?}") };
    assert!(e.to_string().contains("webhook is active"), "{e}");

    let info = bot.get_webhook_info().await.unwrap();
    assert_eq!(info.url.unwrap().as_str(), url);
    assert_eq!(info.pending_update_count, 0);
    assert!(info.last_error_message.unwrap().contains("503"));

    bot.delete_webhook().await.unwrap();
    assert!(server.webhook().is_none());
    server.user_says(42, 42, "three");
    let updates = bot.get_updates().await.unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(server.webhook_deliveries().len(), 3);
}

#[tokio::test]
async fn an_unreachable_webhook_is_retried_until_it_answers() {
    let server = TelegramServer::builder()
        .webhook_retry(Duration::from_millis(10), Duration::from_millis(40))
        .start()
        .await
        .unwrap();
    let bot = bot(&server);
    // A port nobody listens on: bind one, then free it.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    bot.set_webhook(dead.parse().unwrap()).await.unwrap();
    let id = server.user_says(1, 1, "anyone?");
    let failed = server.wait_for_deliveries(3, SOON).await;
    assert!(failed.len() >= 3);
    assert!(failed.iter().all(|d| d.update_id == id && d.status.is_none() && d.error.is_some()));
    assert_eq!(failed.iter().map(|d| d.attempt).take(3).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(server.pending_updates().len(), 1);

    // Pointed at a live receiver, the same update goes through.
    let (url, seen) = receiver(0).await;
    bot.set_webhook(url.parse().unwrap()).await.unwrap();
    let delivered = async {
        loop {
            if server.webhook_deliveries().iter().any(|d| d.delivered()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(SOON, delivered).await.unwrap();
    assert_eq!(seen.lock().unwrap().bodies[0]["update_id"], id);
    assert!(seen.lock().unwrap().secrets[0].is_none());
    assert!(server.pending_updates().is_empty());
}

#[tokio::test]
async fn deleting_the_webhook_can_drop_pending_updates() {
    let server = TelegramServer::start().await.unwrap();
    let bot = bot(&server);
    server.user_says(1, 1, "old");
    bot.delete_webhook().drop_pending_updates(true).await.unwrap();
    assert!(server.pending_updates().is_empty());
    assert!(bot.get_updates().await.unwrap().is_empty());
}
