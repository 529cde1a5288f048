//! The provider contract: several providers in one bot and their elections, acknowledged
//! webhook inbound, the message model both ways, and the provider conformance suite run against
//! the test providers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Capabilities, Provider};
use botmesh_core::{
    Ask, Bot, BotBuilder, BotError, Content, Delivery, DeliveryStatus, Durability, Error,
    ErrorKind, Event, Flow, Inbound, MessageId, Outbound, Step, Trigger,
};
use botmesh_testing::{
    FaultyStore, MemoryCoordinationHub, MemoryCoordinator, ProviderHarness, SECRET_HEADER,
    TestProvider, WEBHOOK_PATH, WebhookTestProvider, provider_conformance,
};
use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica};
use crate::support::builder;

/// A handler that answers `"{replica} via {provider}: {body}"` and counts what it handled.
fn tagged(name: &'static str, handled: &Arc<AtomicUsize>) -> impl FnOnce(BotBuilder) -> BotBuilder {
    let handled = Arc::clone(handled);
    move |b| {
        b.on_message(move |ctx| {
            let handled = Arc::clone(&handled);
            async move {
                handled.fetch_add(1, Ordering::SeqCst);
                let via = ctx.message().inbound.provider.clone();
                ctx.reply(format!("{name} via {via}: {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            }
        })
    }
}

struct Node {
    replica: Replica,
    wa: TestProvider,
    tg: TestProvider,
    web: TestProvider,
}

async fn node(backend: &impl Backend, name: &'static str, handled: &Arc<AtomicUsize>) -> Node {
    let wa = TestProvider::with("wa", Capabilities::exclusive());
    let tg = TestProvider::with("tg", Capabilities::exclusive());
    let web = TestProvider::with("web", Capabilities::shared());
    let (more_tg, more_web) = (tg.clone(), web.clone());
    let handler = tagged(name, handled);
    let bot = move |b: BotBuilder| handler(b.provider(more_tg).provider(more_web));
    let replica = replica(backend, name, wa.clone(), |c| c, bot).await;
    Node { replica, wa, tg, web }
}

/// Waits until exactly one live node runs provider `id`, and returns its index.
async fn the_one_running(nodes: &[&Node], id: &str, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let running: Vec<usize> =
            (0..nodes.len()).filter(|&i| nodes[i].replica.bot.runs_transport(id)).collect();
        if let [one] = running.as_slice() {
            return *one;
        }
        assert!(Instant::now() < deadline, "{id} never ran on exactly one replica: {running:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn two_exclusive_providers_and_a_shared_one_over_three_replicas_each_run_and_fail_over_on_their_own(
    backend: &impl Backend,
) {
    let handled = Arc::new(AtomicUsize::new(0));
    let a = node(backend, "a", &handled).await;
    let b = node(backend, "b", &handled).await;
    let c = node(backend, "c", &handled).await;
    let all = [&a, &b, &c];
    let wa_at = the_one_running(&all, "wa", LEASE * 3).await;
    let tg_at = the_one_running(&all, "tg", LEASE * 3).await;
    // Started together, the replicas spread the exclusive transports.
    assert_ne!(wa_at, tg_at, "a replica leading one transport leaves the next to a free one");
    // Another campaign period or two: still one each, and each started once.
    tokio::time::sleep(LEASE).await;
    assert_eq!(the_one_running(&all, "wa", LEASE).await, wa_at);
    assert_eq!(the_one_running(&all, "tg", LEASE).await, tg_at);
    let starts = |p: fn(&Node) -> &TestProvider| all.iter().map(|n| p(n).starts()).sum::<usize>();
    assert_eq!((starts(|n| &n.wa), starts(|n| &n.tg)), (1, 1));
    assert!(all.iter().all(|n| n.replica.bot.runs_transport("web")), "shared: on every replica");

    // Replies go out through the provider the chat came from.
    let (wa_node, tg_node) = (all[wa_at], all[tg_at]);
    wa_node.wa.say("u1", "hi");
    tg_node.tg.say("u1", "hello");
    c.web.say("u1", "hey");
    for (provider, n) in [(&wa_node.wa, 1), (&tg_node.tg, 1), (&c.web, 1)] {
        tokio::time::timeout(LEASE * 5, provider.wait_sent(n)).await.unwrap();
    }
    let name = ["a", "b", "c"];
    assert_eq!(wa_node.wa.texts_to("u1"), [format!("{} via wa: hi", name[wa_at])]);
    assert_eq!(tg_node.tg.texts_to("u1"), [format!("{} via tg: hello", name[tg_at])]);
    assert_eq!(c.web.texts_to("u1"), ["c via web: hey"]);
    // Each answered on its own provider, by the replica that runs it.
    assert!(tg_node.wa.sent().is_empty() && wa_node.tg.sent().is_empty());

    // A replica that does not run wa's transport cannot send on it.
    let idle = (0..3).find(|i| *i != wa_at).unwrap();
    let refused =
        all[idle].replica.bot.send(&Outbound::text("u1", "x").via("wa")).await.unwrap_err();
    match refused.as_contract() {
        Some(Error::ProviderNotLeader { provider }) => assert_eq!(provider, "wa"),
        other => panic!("expected ProviderNotLeader naming wa, got {other:?}"),
    }

    // Both leaders crash: the survivor takes both transports, each within lease + lease / 3.
    let survivor = (0..3).find(|i| *i != wa_at && *i != tg_at).unwrap();
    let t0 = Instant::now();
    all[wa_at].replica.coordinator.crash();
    all[tg_at].replica.coordinator.crash();
    let bound = LEASE + LEASE / 3 + Duration::from_millis(300);
    let s = &all[survivor].replica.bot;
    tokio::time::timeout(LEASE * 3, s.ready_for("wa"))
        .await
        .expect("the survivor takes wa")
        .unwrap();
    let wa_took = t0.elapsed();
    tokio::time::timeout(LEASE * 3, s.ready_for("tg"))
        .await
        .expect("the survivor takes tg")
        .unwrap();
    let tg_took = t0.elapsed();
    assert!(
        wa_took <= bound && tg_took <= bound,
        "took wa after {wa_took:?}, tg after {tg_took:?}"
    );
    all[survivor].wa.say("u2", "back");
    all[survivor].tg.say("u2", "back");
    tokio::time::timeout(LEASE * 5, all[survivor].wa.wait_sent(1)).await.unwrap();
    tokio::time::timeout(LEASE * 5, all[survivor].tg.wait_sent(1)).await.unwrap();
    let tag = name[survivor];
    assert_eq!(all[survivor].wa.texts_to("u2"), [format!("{tag} via wa: back")]);
    assert_eq!(all[survivor].tg.texts_to("u2"), [format!("{tag} via tg: back")]);
}

on_both_backends!(
    two_exclusive_providers_and_a_shared_one_over_three_replicas_each_run_and_fail_over_on_their_own
);

#[tokio::test]
async fn one_process_answers_each_chat_on_its_own_provider_and_a_send_must_name_one() {
    let (mail, chat) = (TestProvider::with("mail", Capabilities::shared()), TestProvider::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = tagged("one", &handled)(Bot::builder().provider(chat.clone()).provider(mail.clone()))
        .build()
        .unwrap();
    bot.start().await.unwrap();
    chat.say("42", "a");
    mail.say("42", "b");
    chat.settled(&bot).await;
    mail.settled(&bot).await;
    assert_eq!(chat.texts_to("42"), ["one via test: a"]);
    assert_eq!(mail.texts_to("42"), ["one via mail: b"]);
    let ambiguous = bot.send(&Outbound::text("42", "x")).await.unwrap_err();
    assert_eq!(ambiguous.as_contract().map(Error::kind), Some(ErrorKind::NoSuchProvider));
    bot.send(&Outbound::text("42", "x").via("mail")).await.unwrap();
    assert_eq!(mail.texts_to("42").last().map(String::as_str), Some("x"));
    let unknown = bot.send(&Outbound::text("42", "x").via("fax")).await.unwrap_err();
    assert!(
        matches!(unknown.as_contract(), Some(Error::NoSuchProvider { provider }) if provider == "fax")
    );
    let twice = Bot::builder().provider(TestProvider::new()).provider(TestProvider::new()).build();
    assert!(twice.is_err(), "two providers with one id are refused");
}

// --- Acknowledged webhooks ------------------------------------------------------------------

const SECRET: &str = "s3cret-token";

fn delivery(id: &str, chat: &str, text: &str) -> String {
    serde_json::json!({"id": id, "chat": chat, "text": text}).to_string()
}

/// Posts `body` to `router` as the platform does, with `secret`; the status it answered.
async fn post(router: &Router, body: impl Into<Body>, secret: Option<&str>) -> u16 {
    let mut request = Request::post(WEBHOOK_PATH).header("content-type", "application/json");
    if let Some(secret) = secret {
        request = request.header(SECRET_HEADER, secret);
    }
    let response = router.clone().oneshot(request.body(body.into()).unwrap()).await.unwrap();
    response.status().as_u16()
}

struct Hooked {
    bot: Bot,
    hook: WebhookTestProvider,
    router: Router,
}

async fn hooked(
    backend: &impl Backend,
    store: Arc<FaultyStore>,
    name: &'static str,
    handled: &Arc<AtomicUsize>,
) -> Hooked {
    let hook = WebhookTestProvider::new("hook", SECRET);
    let coordination = CoordinationConfig::new(backend.coordinator(name).await).build();
    let bot = tagged(name, handled)(
        Bot::builder()
            .provider(hook.clone())
            .store(store)
            .coordination(coordination)
            .durability(Durability::new()),
    )
    .build()
    .unwrap();
    bot.start().await.unwrap();
    let router = hook.router();
    Hooked { bot, hook, router }
}

async fn a_webhook_message_whose_journal_write_fails_is_answered_503_and_handled_once_when_retried_elsewhere(
    backend: &impl Backend,
) {
    let store = Arc::new(FaultyStore::new(backend.store()));
    let handled = Arc::new(AtomicUsize::new(0));
    let a = hooked(backend, Arc::clone(&store), "a", &handled).await;
    let b = hooked(backend, Arc::clone(&store), "b", &handled).await;
    store.fail_journal_appends(1);
    let body = delivery("w1", "c", "pay");
    assert_eq!(post(&a.router, body.clone(), Some(SECRET)).await, 503, "not journaled: retry");
    assert_eq!(post(&b.router, body.clone(), Some(SECRET)).await, 200, "taken at b");
    tokio::time::timeout(LEASE * 5, b.hook.wait_sent(1)).await.unwrap();
    b.bot.wait_idle().await;
    // Delivered again at either replica (the platform never saw b's answer): 200, not again.
    // (Delivered elsewhere while b still handles it, it would be answered 503 and come back.)
    assert_eq!(post(&a.router, body.clone(), Some(SECRET)).await, 200);
    assert_eq!(post(&b.router, body, Some(SECRET)).await, 200);
    a.bot.wait_idle().await;
    b.bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "handled once");
    assert_eq!(b.hook.texts_to("c"), ["b via hook: pay"]);
    assert!(a.hook.sent().is_empty());
}

async fn a_duplicate_webhook_delivery_is_answered_200_and_handled_once(backend: &impl Backend) {
    let store = Arc::new(FaultyStore::new(backend.store()));
    let handled = Arc::new(AtomicUsize::new(0));
    let a = hooked(backend, Arc::clone(&store), "a", &handled).await;
    let b = hooked(backend, store, "b", &handled).await;
    let body = delivery("w2", "c", "hi");
    assert_eq!(post(&a.router, body.clone(), Some(SECRET)).await, 200);
    assert_eq!(post(&a.router, body.clone(), Some(SECRET)).await, 200, "a duplicate at once");
    tokio::time::timeout(LEASE * 5, a.hook.wait_sent(1)).await.unwrap();
    a.bot.wait_idle().await;
    assert_eq!(post(&b.router, body.clone(), Some(SECRET)).await, 200, "and at another replica");
    b.bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "handled once");
    assert_eq!(a.hook.texts_to("c"), ["a via hook: hi"]);
    // Once the bot stops, the endpoint asks the platform to deliver elsewhere.
    a.bot.stop().await.unwrap();
    assert_eq!(post(&a.router, delivery("w3", "c", "late"), Some(SECRET)).await, 503);
}

on_both_backends!(
    a_webhook_message_whose_journal_write_fails_is_answered_503_and_handled_once_when_retried_elsewhere,
    a_duplicate_webhook_delivery_is_answered_200_and_handled_once,
);

#[tokio::test]
async fn a_wrong_or_missing_secret_is_answered_401_and_never_reaches_the_bot() {
    let hook = WebhookTestProvider::new("hook", SECRET);
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = tagged("one", &handled)(Bot::builder().provider(hook.clone())).build().unwrap();
    bot.start().await.unwrap();
    let router = hook.router();
    assert_eq!(post(&router, delivery("m", "c", "x"), None).await, 401);
    assert_eq!(post(&router, delivery("m", "c", "x"), Some("s3cret-tokeN")).await, 401);
    assert_eq!(post(&router, delivery("m", "c", "x"), Some("")).await, 401);
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 0);
    assert_eq!(post(&router, delivery("m", "c", "x"), Some(SECRET)).await, 200);
}

/// One generated delivery that is not a message, and the status it must be answered with.
fn malformed() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, Option<String>, u16)> {
    use proptest::prelude::*;
    let secret = || Just(Some(SECRET.to_owned()));
    let valid = ("[a-z0-9]{1,12}", "[a-z0-9]{1,12}", ".{0,40}")
        .prop_map(|(id, chat, text)| delivery(&id, &chat, &text));
    prop_oneof![
        // Bytes that are not JSON (a NUL first makes sure of it).
        (proptest::collection::vec(any::<u8>(), 0..300), secret()).prop_map(|(b, s)| (
            [vec![0], b].concat(),
            s,
            400
        )),
        // A valid delivery cut short.
        (valid.clone(), 1..20usize, secret()).prop_map(|(d, cut, s)| {
            let keep = d.len().saturating_sub(cut);
            (d.into_bytes()[..keep].to_vec(), s, 400)
        }),
        // The right shape with the wrong types, fields or values.
        (
            prop_oneof![
                any::<i64>().prop_map(|n| serde_json::json!({"id": n, "chat": "c", "text": "x"})),
                ".{0,20}".prop_map(|t| serde_json::json!({"id": "m", "chat": ["c"], "text": t})),
                ".{0,20}"
                    .prop_map(|t| serde_json::json!({"id": "m", "chat": "c", "text": {"t": t}})),
                ".{0,20}"
                    .prop_map(|t| serde_json::json!({"id": "m", "chat": "c", "text": t, "x": 1})),
                ".{0,20}".prop_map(|t| serde_json::json!({"id": "", "chat": "c", "text": t})),
                "[a-z]{257,300}"
                    .prop_map(|id| serde_json::json!({"id": id, "chat": "c", "text": "x"})),
                "[a-z]{1,5}"
                    .prop_map(|t| serde_json::json!({"id": "m", "chat": "c\u{7}", "text": t})),
                ".{0,20}"
                    .prop_map(|t| serde_json::json!({"id": "m", "chat": "c"}).to_string() + &t)
                    .prop_map(serde_json::Value::String),
                ".{0,20}".prop_map(|t| serde_json::json!({"id": "m", "chat": "c", "text": t,
                    "content": {"type": "text", "body": t}})),
                ".{0,20}".prop_map(|t| serde_json::json!({"id": "m", "chat": "c",
                    "content": {"type": "hologram", "body": t}})),
                Just(serde_json::json!([1, 2, 3])),
                Just(serde_json::Value::Null),
            ],
            secret(),
        )
            .prop_map(|(v, s)| (v.to_string().into_bytes(), s, 400)),
        // Too large: refused before it is read.
        (64 * 1024 + 1..80 * 1024usize, secret()).prop_map(|(n, s)| (vec![b'x'; n], s, 413)),
        // A valid delivery without the secret, or with a wrong one.
        (valid, prop_oneof![Just(None), "[!-~]{0,16}".prop_map(Some)]).prop_map(|(d, s)| (
            d.into_bytes(),
            s,
            401
        )),
    ]
}

#[test]
fn ten_thousand_generated_malformed_deliveries_are_each_answered_with_a_typed_4xx_and_no_panic() {
    use proptest::test_runner::{Config, TestRunner};
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let runtime = runtime.unwrap();
    let hook = WebhookTestProvider::new("hook", SECRET);
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = tagged("one", &handled)(Bot::builder().provider(hook.clone())).build().unwrap();
    runtime.block_on(bot.start()).unwrap();
    let router = hook.router();
    let config = Config { cases: 10_000, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let seen = Mutex::new([0usize; 3]);
    runner
        .run(&malformed(), |(body, secret, expected)| {
            let status = runtime.block_on(post(&router, body, secret.as_deref()));
            // The one case a generated secret is the real one: then the body is valid.
            let expected =
                if expected == 401 && secret.as_deref() == Some(SECRET) { 200 } else { expected };
            proptest::prop_assert_eq!(status, expected);
            let slot = match status {
                400 => 0,
                401 => 1,
                _ => 2,
            };
            seen.lock().unwrap()[slot] += 1;
            Ok(())
        })
        .unwrap();
    runtime.block_on(bot.wait_idle());
    assert_eq!(handled.load(Ordering::SeqCst), 0, "nothing malformed reached the bot");
    let seen = seen.into_inner().unwrap();
    assert!(seen.iter().all(|n| *n > 500), "every kind of refusal was exercised: {seen:?}");
    assert_eq!(seen.iter().sum::<usize>(), 10_000);
}

// --- The message model ----------------------------------------------------------------------

#[tokio::test]
async fn a_button_press_answers_the_question_a_flow_asked() {
    let (b, provider, _) = builder();
    let flow = Flow::new("confirm")
        .trigger(Trigger::keyword("buy"))
        .ask(Ask::new("ok", "Sure?").choices(["Yes", "No"]))
        .do_step("done", |c| async move {
            let ok: String = c.get("ok").unwrap();
            c.send(format!("answer {ok}, pressed {}", c.message().inbound.content.type_name()))
                .await?;
            Ok::<_, BotError>(Step::Next)
        });
    let bot = b.flow(flow).build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "buy");
    let press = Content::Button { id: "yes".into(), title: "Yes".into() };
    provider.inject(Inbound::new("test", "p1", "c", press));
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["Sure?", "answer Yes, pressed button"]);
}

#[tokio::test]
async fn unsupported_content_reaches_the_handler_with_its_raw_payload() {
    let (b, provider, _) = builder();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let bot = b
        .on_message(move |ctx| {
            let kept = Arc::clone(&kept);
            async move {
                kept.lock().unwrap().push(ctx.message().inbound.content.clone());
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let poll = Content::Unsupported { kind: "poll".into(), raw: r#"{"poll":{"q":"?"}}"#.into() };
    provider.inject(Inbound::new("test", "m1", "c", poll.clone()));
    let edit =
        Content::Edit { of: MessageId::new("m0"), content: Box::new(Content::text("fixed")) };
    provider.inject(Inbound::new("test", "m2", "c", edit.clone()));
    provider.settled(&bot).await;
    assert_eq!(*seen.lock().unwrap(), [poll, edit]);
}

#[tokio::test]
async fn delivery_receipts_are_events_and_never_wake_a_conversation() {
    let (b, provider, rec) = builder();
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = tagged("one", &handled)(b).build().unwrap();
    bot.start().await.unwrap();
    provider.say("c", "hi");
    provider.settled(&bot).await;
    provider.receipt(Delivery::new("c", "out1", DeliveryStatus::Read));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !rec.events().iter().any(|e| matches!(e, Event::Delivery { .. })) {
        assert!(Instant::now() < deadline, "no delivery event");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "the receipt was not a message");
    let receipt = rec.events().into_iter().find_map(|e| match e {
        Event::Delivery { provider, delivery } => Some((provider, delivery.status)),
        _ => None,
    });
    assert_eq!(receipt, Some(("test".to_owned(), DeliveryStatus::Read)));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_reply_is_sent_again_after_the_platform_s_wait() {
    let (b, provider, rec) = builder();
    let bot = tagged("one", &Arc::default())(b).build().unwrap();
    bot.start().await.unwrap();
    provider.rate_limit_sends(2, Duration::from_secs(3));
    let t0 = Instant::now();
    provider.say("c", "hi");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["one via test: hi"], "delivered once");
    assert!(t0.elapsed() >= Duration::from_secs(6), "after both waits: {:?}", t0.elapsed());
    let waits = rec.events().iter().filter(|e| matches!(e, Event::RateLimited { .. })).count();
    assert_eq!(waits, 2);
}

// --- The conformance suite on the test providers --------------------------------------------

/// The conformance suite's view of [`WebhookTestProvider`]: every instance is one replica's,
/// posted to through its router.
#[derive(Default)]
struct WebhookHarness {
    instances: Mutex<Vec<(Arc<dyn Provider>, WebhookTestProvider)>>,
}

impl WebhookHarness {
    fn hook(&self, of: &Arc<dyn Provider>) -> WebhookTestProvider {
        let instances = self.instances.lock().unwrap();
        instances.iter().find(|(p, _)| Arc::ptr_eq(p, of)).map(|(_, h)| h.clone()).unwrap()
    }

    fn all(&self) -> Vec<WebhookTestProvider> {
        self.instances.lock().unwrap().iter().map(|(_, h)| h.clone()).collect()
    }
}

impl ProviderHarness for WebhookHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        let hook = WebhookTestProvider::new("hook", SECRET);
        let provider: Arc<dyn Provider> = Arc::new(hook.clone());
        self.instances.lock().unwrap().push((Arc::clone(&provider), hook));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        Some(post(&self.hook(to).router(), delivery(id, chat, text), Some(SECRET)).await)
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.all().iter().flat_map(|h| h.texts_to(chat)).collect()
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        for hook in self.all() {
            hook.rate_limit_sends(1, retry_after);
        }
    }

    async fn malformed(&self, to: &Arc<dyn Provider>) -> Option<u16> {
        Some(post(&self.hook(to).router(), "{\"id\": 7", Some(SECRET)).await)
    }
}

/// The conformance suite's view of [`TestProvider`]: a stream provider, acknowledging nothing.
struct StreamHarness {
    capabilities: Capabilities,
    instances: Mutex<Vec<(Arc<dyn Provider>, TestProvider)>>,
}

impl StreamHarness {
    fn new(capabilities: Capabilities) -> Self {
        Self { capabilities, instances: Mutex::default() }
    }

    fn all(&self) -> Vec<TestProvider> {
        self.instances.lock().unwrap().iter().map(|(_, p)| p.clone()).collect()
    }
}

impl ProviderHarness for StreamHarness {
    async fn provider(&self) -> Arc<dyn Provider> {
        let test = TestProvider::with("stream", self.capabilities);
        let provider: Arc<dyn Provider> = Arc::new(test.clone());
        self.instances.lock().unwrap().push((Arc::clone(&provider), test));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        let instances = self.instances.lock().unwrap();
        let (_, test) = instances.iter().find(|(p, _)| Arc::ptr_eq(p, to)).unwrap();
        test.inject(Inbound::text("stream", id, chat, text));
        None
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.all().iter().flat_map(|p| p.texts_to(chat)).collect()
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        for p in self.all() {
            p.rate_limit_sends(1, retry_after);
        }
    }

    async fn malformed(&self, _: &Arc<dyn Provider>) -> Option<u16> {
        None
    }
}

fn memory_replicas() -> impl Fn(&str) -> Arc<dyn botmesh_core::coordination::Coordination> {
    let hub = MemoryCoordinationHub::new();
    move |id| {
        CoordinationConfig::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE)).build()
    }
}

#[tokio::test]
async fn the_webhook_test_provider_passes_the_provider_conformance_suite() {
    provider_conformance(&WebhookHarness::default(), memory_replicas()).await;
}

#[tokio::test]
async fn the_test_provider_passes_the_provider_conformance_suite_shared_and_exclusive() {
    provider_conformance(&StreamHarness::new(Capabilities::shared()), memory_replicas()).await;
    provider_conformance(&StreamHarness::new(Capabilities::exclusive()), memory_replicas()).await;
}
