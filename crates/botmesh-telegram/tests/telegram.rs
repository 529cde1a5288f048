//! `TelegramProvider` against the Bot API stand-in of `botmesh-testing`, through the real
//! teloxide client: both modes, the mapping, rate limits, failover of the poller, and the
//! provider conformance suite.
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
use botmesh_core::{
    Bot, BotBuilder, BotError, Button, Content, Durability, Event, MemoryStore, OutboundContent,
    Provider, Store,
};
use botmesh_telegram::{SECRET_HEADER, TelegramProvider};
use botmesh_testing::telegram::{Fault, TelegramServer};
use botmesh_testing::{
    MemoryCoordinationHub, MemoryCoordinator, ProviderHarness, provider_conformance,
};
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tokio::time::Instant;
use tower::ServiceExt;

const TOKEN: &str = "123456:test-token";
const LEASE: Duration = Duration::from_secs(1);
const WITHIN: Duration = Duration::from_secs(15);

fn polling(server: &TelegramServer) -> TelegramProvider {
    TelegramProvider::polling(TOKEN)
        .with_api_url(server.api_url().parse().unwrap())
        .with_poll_timeout(Duration::from_secs(1))
}

/// An echo bot that counts what it handled.
fn echo(builder: BotBuilder, handled: &Arc<AtomicUsize>) -> BotBuilder {
    let handled = Arc::clone(handled);
    builder.on_message(move |ctx| {
        let handled = Arc::clone(&handled);
        async move {
            handled.fetch_add(1, Ordering::SeqCst);
            if ctx.body() == "menu" {
                let buttons = vec![Button::new("yes", "Yes please"), Button::new("no", "No")];
                let content = OutboundContent::Buttons { body: "Sure?".into(), buttons };
                ctx.send(&botmesh_core::Outbound::new(ctx.chat().clone(), content)).await?;
                return Ok(());
            }
            let kind = ctx.message().inbound.content.type_name();
            ctx.reply(format!("echo {kind} {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        }
    })
}

async fn wait_texts(server: &TelegramServer, chat: i64, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let texts = server.sent_texts(chat);
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "chat {chat} got {texts:?}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn polling_answers_users_commands_lose_the_bot_s_username_and_topics_are_kept() {
    let server = TelegramServer::builder().bot_username("shop_bot").start().await.unwrap();
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(42, 42, "/start@shop_bot now");
    assert_eq!(wait_texts(&server, 42, 1).await, ["echo text /start now"]);
    server.user_says_in_thread(-100_777, 9, 5, "in a topic");
    wait_texts(&server, -100_777, 1).await;
    let sent = server.sent(-100_777);
    assert_eq!(
        (sent[0].thread_id, sent[0].text.as_deref()),
        (Some(9), Some("echo text in a topic"))
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_photo_s_bytes_are_fetched_through_the_provider_and_edits_and_reactions_arrive_typed() {
    let server = TelegramServer::start().await.unwrap();
    let bot = Bot::builder()
        .provider(polling(&server))
        .on_message(|ctx| async move {
            let answer = match &ctx.message().inbound.content {
                Content::Media { caption, .. } => {
                    let bytes = ctx.media().await?;
                    format!("{} bytes, {}", bytes.len(), caption.as_deref().unwrap_or_default())
                }
                Content::Edit { of, content } => {
                    format!("{of} now says {}", content.as_text().unwrap_or_default())
                }
                Content::Reaction { to, emoji } => format!("{to} got {emoji:?}"),
                other => format!("a {}", other.type_name()),
            };
            ctx.reply(answer).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.user_sends_photo(8, 8, vec![7u8; 1234], Some("my cat"));
    assert_eq!(wait_texts(&server, 8, 1).await, ["1234 bytes, my cat"]);
    let said = server.next_message_id(8);
    server.user_sends(serde_json::json!({"message": {
        "message_id": said, "date": 0, "text": "helo",
        "chat": {"id": 8, "type": "private", "first_name": "u"},
        "from": {"id": 8, "is_bot": false, "first_name": "u"},
    }}));
    wait_texts(&server, 8, 2).await;
    server.user_edits(8, 8, said, "hello");
    let texts = wait_texts(&server, 8, 3).await;
    assert_eq!(texts[2], format!("8:{said} now says hello"));
    server.user_sends(serde_json::json!({"message_reaction": {
        "chat": {"id": 8, "type": "private", "first_name": "u"},
        "message_id": said, "date": 0,
        "user": {"id": 8, "is_bot": false, "first_name": "u"},
        "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}],
    }}));
    let texts = wait_texts(&server, 8, 4).await;
    assert_eq!(texts[3], format!("8:{said} got Some(\"👍\")"));
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn media_goes_out_uploaded_or_by_url_and_group_members_each_have_a_conversation() {
    use botmesh_core::{MediaKind, MediaSource, Outbound};
    use botmesh_testing::telegram::MediaSource as Sent;
    let server = TelegramServer::start().await.unwrap();
    let bot = Bot::builder()
        .provider(polling(&server))
        .on_message(|ctx| async move {
            let (chat, body) = (ctx.chat().clone(), ctx.body().to_owned());
            let source = match body.as_str() {
                "upload" => MediaSource::bytes(vec![1u8, 2, 3], Some("a.png".into()), None),
                _ => MediaSource::url("https://cdn.example/cat.png"),
            };
            let kind = MediaKind::Image;
            let content = OutboundContent::Media { kind, source, caption: Some(body) };
            ctx.send(&Outbound::new(chat, content)).await?;
            // In a group, the key is the member's own.
            ctx.reply(ctx.key().to_string()).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.user_says(-500, 1, "upload");
    server.wait_for_sent(-500, 2, WITHIN).await;
    server.user_says(-500, 2, "link");
    let sent = server.wait_for_sent(-500, 4, WITHIN).await;
    let media: Vec<Sent> = sent.iter().filter_map(|m| m.media.clone()).map(|m| m.source).collect();
    assert_eq!(
        media,
        [
            Sent::Upload { file_name: Some("a.png".into()), bytes: vec![1, 2, 3] },
            Sent::Url("https://cdn.example/cat.png".into())
        ]
    );
    let keys: Vec<String> =
        sent.iter().filter(|m| m.media.is_none()).filter_map(|m| m.text.clone()).collect();
    assert_eq!(keys, ["telegram:-500/1", "telegram:-500/2"], "one conversation per member");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_button_press_reaches_the_bot_titled_and_its_callback_query_is_answered() {
    let server = TelegramServer::start().await.unwrap();
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(7, 7, "menu");
    let deadline = Instant::now() + WITHIN;
    while server.sent(7).is_empty() {
        assert!(Instant::now() < deadline, "no menu");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let menu = server.sent(7)[0].clone();
    assert!(menu.reply_markup.is_some(), "buttons go out as an inline keyboard");
    server.press_button(7, 7, "yes", menu.message_id);
    let texts = wait_texts(&server, 7, 2).await;
    assert_eq!(texts[1], "echo button Yes please");
    let deadline = Instant::now() + WITHIN;
    while server.callback_answers().is_empty() {
        assert!(Instant::now() < deadline, "the callback query was never answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_429_is_waited_out_and_the_reply_goes_out_once() {
    let server = TelegramServer::start().await.unwrap();
    let limited = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&limited);
    let bot = echo(Bot::builder().provider(polling(&server)), &Arc::default())
        .on(move |e| {
            if let Event::RateLimited { retry_after, .. } = e {
                seen.lock().unwrap().push(*retry_after);
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    server.fail_next("sendMessage", Fault::TooManyRequests { retry_after: Duration::from_secs(1) });
    let t0 = Instant::now();
    server.user_says(3, 3, "hi");
    assert_eq!(wait_texts(&server, 3, 1).await, ["echo text hi"]);
    assert!(t0.elapsed() >= Duration::from_secs(1), "waited as asked: {:?}", t0.elapsed());
    assert_eq!(*limited.lock().unwrap(), [Duration::from_secs(1)]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.sent_texts(3).len(), 1, "sent once");
    bot.stop().await.unwrap();
}

fn replica(
    hub: &MemoryCoordinationHub,
    id: &str,
) -> (Arc<MemoryCoordinator>, Arc<dyn Coordination>) {
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
    // A crashed replica's stop gives up on its queues after `settle`, not the default minute.
    let coordination = CoordinationConfig::from_arc(Arc::clone(&coordinator) as _)
        .settle(Duration::from_secs(2))
        .turn_wait(Duration::from_secs(10))
        .build();
    (coordinator, coordination)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_poll_one_at_a_time_and_a_standby_takes_over_without_losing_or_repeating() {
    let server = TelegramServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(polling(&server))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let leader = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().position(|(_, b)| b.runs_transport("telegram"))
    };
    let deadline = Instant::now() + WITHIN;
    while leader(&replicas).is_none() {
        assert!(Instant::now() < deadline, "nobody polls");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for chat in 1..=5 {
        server.user_says(chat, chat, &format!("before {chat}"));
    }
    for chat in 1..=5 {
        wait_texts(&server, chat, 1).await;
    }
    let old = leader(&replicas).unwrap();
    let t0 = Instant::now();
    replicas[old].0.crash();
    // Said while nobody polls: Telegram holds them for the next poller.
    for chat in 1..=5 {
        server.user_says(chat, chat, &format!("after {chat}"));
    }
    // The standby polls within lease + lease / 3 of the crash (a little more for the clock).
    let deadline = Instant::now() + WITHIN;
    while !replicas.iter().enumerate().any(|(i, (_, b))| i != old && b.runs_transport("telegram")) {
        assert!(Instant::now() < deadline, "no standby took over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took_over = t0.elapsed();
    assert!(
        took_over <= LEASE + LEASE / 3 + Duration::from_millis(300),
        "took over after {took_over:?}"
    );
    for chat in 1..=5 {
        let texts = wait_texts(&server, chat, 2).await;
        assert_eq!(texts, [format!("echo text before {chat}"), format!("echo text after {chat}")]);
    }
    let took = t0.elapsed();
    let new = leader(&replicas).expect("a standby polls");
    assert_ne!(new, old);
    assert!(took <= LEASE + LEASE / 3 + Duration::from_secs(2), "answered after {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 10, "every update handled once");
    assert_eq!(server.max_pollers(), 1, "never two pollers at once");
    assert_eq!(server.conflicts(), 0);
    for (_, bot) in &replicas {
        bot.stop().await.unwrap();
    }
}

/// Waits until `bot` reported an event `wanted` matches.
async fn event(events: &Arc<Mutex<Vec<Event>>>, wanted: impl Fn(&Event) -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !events.lock().unwrap().iter().any(&wanted) {
        assert!(Instant::now() < deadline, "never saw the event: {:?}", events.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn recorded(builder: BotBuilder) -> (BotBuilder, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&events);
    (builder.on(move |e| kept.lock().unwrap().push(e.clone())), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_closes_the_poller_s_transport_and_its_leader_steps_down() {
    let server = TelegramServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let coordination = CoordinationConfig::from_arc(coordinator as _)
        .provider_down(Duration::from_millis(500))
        .step_down_pause(Duration::from_secs(60))
        .build();
    let (builder, events) =
        recorded(Bot::builder().provider(polling(&server)).coordination(coordination));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    server.revoke_token();
    event(&events, |e| {
        matches!(e, Event::Transport { status: botmesh_core::TransportStatus::Closed, .. })
    })
    .await;
    event(&events, |e| {
        matches!(e, Event::Follower { reason: botmesh_core::FollowReason::ProviderDown, .. })
    })
    .await;
    assert!(!bot.runs_transport("telegram"), "stepped down: a standby may poll");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_webhook_set_elsewhere_is_a_conflict_that_closes_the_polling_transport() {
    use teloxide_core::payloads::setters::*;
    use teloxide_core::requests::{Request, Requester};
    let server = TelegramServer::start().await.unwrap();
    let provider = polling(&server);
    let (builder, events) = recorded(Bot::builder().provider(provider.clone()));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    server.user_says(1, 1, "hi");
    wait_texts(&server, 1, 1).await;
    let url = "https://elsewhere.example/hook".parse().unwrap();
    provider.client().set_webhook(url).secret_token("x").send().await.unwrap();
    event(&events, |e| {
        matches!(e, Event::Transport { status: botmesh_core::TransportStatus::Closed, .. })
    })
    .await;
    assert_eq!(provider.status(), botmesh_core::TransportStatus::Closed);
    bot.stop().await.unwrap();
}

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
    assert!(server.sent_texts(5).is_empty(), "nothing refused reached the bot");
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

// --- The conformance suite -------------------------------------------------------------------

/// The suite's view of Telegram: chats are named by the suite, numbered here.
struct Harness {
    server: TelegramServer,
    webhook: bool,
    chats: Mutex<HashMap<String, i64>>,
    /// The update each suite message id was first delivered as, to deliver it again.
    updates: Mutex<HashMap<String, serde_json::Value>>,
    /// Each webhook instance's router.
    routers: Mutex<Vec<(Arc<dyn Provider>, botmesh_traits::webhook::axum::Router)>>,
}

impl Harness {
    async fn new(webhook: bool) -> Self {
        Self {
            server: TelegramServer::start().await.unwrap(),
            webhook,
            chats: Mutex::default(),
            updates: Mutex::default(),
            routers: Mutex::default(),
        }
    }

    fn chat(&self, name: &str) -> i64 {
        let mut chats = self.chats.lock().unwrap();
        let next = i64::try_from(chats.len()).unwrap() + 1000;
        *chats.entry(name.to_owned()).or_insert(next)
    }
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        if !self.webhook {
            return Arc::new(polling(&self.server));
        }
        let url = "https://bot.example/telegram".parse().unwrap();
        let provider = TelegramProvider::webhook(TOKEN, url, "s")
            .with_api_url(self.server.api_url().parse().unwrap());
        let router = provider.router();
        let provider: Arc<dyn Provider> = Arc::new(provider);
        self.routers.lock().unwrap().push((Arc::clone(&provider), router));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        let chat = self.chat(chat);
        let known = self.updates.lock().unwrap().get(id).cloned();
        let update = known.unwrap_or_else(|| {
            let message_id = self.server.next_message_id(chat);
            serde_json::json!({"message": {
                "message_id": message_id, "date": 0, "text": text,
                "chat": {"id": chat, "type": "private", "first_name": "u"},
                "from": {"id": chat, "is_bot": false, "first_name": "u"},
            }})
        });
        self.updates.lock().unwrap().insert(id.to_owned(), update.clone());
        if !self.webhook {
            self.server.user_sends(update);
            return None;
        }
        let mut body = update;
        body["update_id"] =
            serde_json::json!(i64::try_from(self.updates.lock().unwrap().len()).unwrap());
        let router = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, r)| r.clone()).unwrap()
        };
        let request = Request::post("/telegram")
            .header("content-type", "application/json")
            .header(SECRET_HEADER, "s")
            .body(Body::from(body.to_string()))
            .unwrap();
        Some(router.oneshot(request).await.unwrap().status().as_u16())
    }

    fn chat_id(&self, name: &str) -> String {
        self.chat(name).to_string()
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.server.sent_texts(self.chat(chat))
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        self.server.fail_next("sendMessage", Fault::TooManyRequests { retry_after });
    }

    async fn malformed(&self, to: &Arc<dyn Provider>) -> Option<u16> {
        if !self.webhook {
            return None;
        }
        let router = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, r)| r.clone()).unwrap()
        };
        let request = Request::post("/telegram")
            .header(SECRET_HEADER, "s")
            .body(Body::from("{\"update_id\": [}"))
            .unwrap();
        Some(router.oneshot(request).await.unwrap().status().as_u16())
    }
}

fn memory_replicas() -> impl Fn(&str) -> Arc<dyn Coordination> {
    let hub = MemoryCoordinationHub::new();
    move |id| replica(&hub, id).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_passes_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(false).await, memory_replicas()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_pass_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(true).await, memory_replicas()).await;
}
