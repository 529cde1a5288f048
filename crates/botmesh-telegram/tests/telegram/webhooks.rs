//! Webhooks: secrets, malformed bodies, three replicas behind a balancer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability, Event, MemoryStore};
use botmesh_telegram::{SECRET_HEADER, TelegramProvider};
use botmesh_testing::MemoryCoordinationHub;
use botmesh_testing::telegram::TelegramServer;
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tokio::time::Instant;
use tower::ServiceExt;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn webhooks_answer_updates_and_refuse_a_wrong_secret_and_a_malformed_body() {
    let server = TelegramServer::start().await.unwrap();
    // The URL is known once the endpoint is bound: bind first, then build the provider on it.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let url = format!("http://{}/telegram", listener.local_addr().unwrap());
    let provider = TelegramProvider::webhook(TOKEN, url.parse().unwrap(), "hook-secret")
        .with_api_url(server.api_url().parse().unwrap());
    let router = provider.router();
    tokio::spawn({
        let router = router.clone();
        async move { botmesh_traits::webhook::axum::serve(listener, router).await }
    });
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
    let hook = server.webhook().expect("the provider set its webhook");
    assert_eq!(hook.url, url);
    server.user_says(11, 11, "hello");
    assert_eq!(wait_texts(&server, 11, 1).await, ["echo text hello"]);

    let post = |secret: Option<&'static str>, body: &'static str| {
        let router = router.clone();
        async move {
            let mut request = Request::post("/telegram").header("content-type", "application/json");
            if let Some(secret) = secret {
                request = request.header(SECRET_HEADER, secret);
            }
            router.oneshot(request.body(Body::from(body)).unwrap()).await.unwrap().status().as_u16()
        }
    };
    let update = r#"{"update_id": 999, "message": {"message_id": 1, "date": 0, "chat": {"id": 5, "type": "private", "first_name": "x"}, "text": "hi"}}"#;
    assert_eq!(post(None, update).await, 401);
    assert_eq!(post(Some("wrong"), update).await, 401);
    let before = errors.load(Ordering::SeqCst);
    assert_eq!(post(Some("hook-secret"), "{\"update_id\": \"x\"").await, 400);
    let deadline = Instant::now() + WITHIN;
    while errors.load(Ordering::SeqCst) == before {
        assert!(Instant::now() < deadline, "a malformed update is an error event");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The same update with the right secret is answered: the refusals were the secret's.
    assert_eq!(post(Some("hook-secret"), update).await, 200);
    assert_eq!(wait_texts(&server, 5, 1).await, ["echo text hi"], "only the signed one went in");
    bot.stop().await.unwrap();
}

/// A load balancer in front of replicas' webhook routers: each request goes to the next
/// replica that is up; one that is down answers `502`, as a balancer whose backend is gone does.
#[derive(Clone)]
struct Balancer {
    routers: Arc<Vec<botmesh_traits::webhook::axum::Router>>,
    down: Arc<Mutex<Vec<bool>>>,
    next: Arc<AtomicUsize>,
}

async fn balance(
    botmesh_traits::webhook::axum::extract::State(lb): botmesh_traits::webhook::axum::extract::State<Balancer>,
    request: Request<Body>,
) -> botmesh_traits::webhook::axum::response::Response {
    use botmesh_traits::webhook::axum::response::IntoResponse;
    let i = lb.next.fetch_add(1, Ordering::SeqCst) % lb.routers.len();
    if lb.down.lock().unwrap()[i] {
        return botmesh_traits::webhook::axum::http::StatusCode::BAD_GATEWAY.into_response();
    }
    match lb.routers[i].clone().oneshot(request).await {
        Ok(response) => response.into_response(),
        Err(never) => match never {},
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_webhooks_answer_every_chat_in_order_and_each_update_once() {
    let server = TelegramServer::builder()
        .webhook_retry(Duration::from_millis(20), Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let url: url::Url =
        format!("http://{}/telegram", listener.local_addr().unwrap()).parse().unwrap();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let (mut replicas, mut routers) = (Vec::new(), Vec::new());
    for id in ["a", "b", "c"] {
        let provider = TelegramProvider::webhook(TOKEN, url.clone(), "lb-secret")
            .with_api_url(server.api_url().parse().unwrap());
        routers.push(provider.router());
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(provider)
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let lb = Balancer {
        routers: Arc::new(routers),
        down: Arc::new(Mutex::new(vec![false; 3])),
        next: Arc::default(),
    };
    let app = botmesh_traits::webhook::axum::Router::new()
        .route("/telegram", botmesh_traits::webhook::axum::routing::post(balance))
        .with_state(lb.clone());
    tokio::spawn(async move { botmesh_traits::webhook::axum::serve(listener, app).await });

    let chats: Vec<i64> = (1..=4).collect();
    for round in 0..6 {
        if round == 3 {
            // A replica dies: the balancer's requests to it fail and Telegram retries them.
            replicas[1].0.crash();
            lb.down.lock().unwrap()[1] = true;
        }
        for chat in &chats {
            server.user_says(*chat, *chat, &format!("m{round}"));
        }
    }
    for chat in &chats {
        let texts = wait_texts(&server, *chat, 6).await;
        let expected: Vec<String> = (0..6).map(|r| format!("echo text m{r}")).collect();
        assert_eq!(texts, expected, "chat {chat} in order");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 24, "each update handled once");
    let retried = server.webhook_deliveries().iter().filter(|d| !d.delivered()).count();
    assert!(retried > 0, "the dead replica's deliveries were refused and retried");
    for (i, (_, bot)) in replicas.iter().enumerate() {
        if i != 1 {
            bot.stop().await.unwrap();
        }
    }
}
