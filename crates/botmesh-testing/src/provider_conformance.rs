//! The provider conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failed expectation is a failed test, reported by its panic"
)]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::{Bot, BotError, Durability, Event, MemoryStore};
use botmesh_traits::{Outbound, Provider, Store, TransportStatus};
use tokio::time::Instant;

use crate::FaultyStore;

/// A provider and the platform stand-in it talks to, as [`provider_conformance`] drives them.
///
/// Implement it in a provider crate's tests, over the crate's local server that speaks the
/// platform's wire protocol, so that the provider's real client code runs.
pub trait ProviderHarness: Send + Sync {
    /// A new provider instance on the platform stand-in: what one replica of a bot runs. Each
    /// call is another replica's instance of the same bot account.
    fn provider(&self) -> impl Future<Output = Arc<dyn Provider>> + Send;

    /// The platform delivers a text from user `chat` (with the platform's message id `id`) to
    /// the instance `to`, the way the platform does: a webhook request, an update a poller
    /// fetches, a gateway event. For a platform that waits for an answer (a webhook), returns
    /// the HTTP status the instance answered; `None` when the platform waits for none.
    fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> impl Future<Output = Option<u16>> + Send;

    /// The platform's id of the chat the suite calls `name`, for the bot to send to (a
    /// platform with numeric chat ids numbers the names). By default, `name` itself.
    fn chat_id(&self, name: &str) -> String {
        name.to_owned()
    }

    /// The texts the platform received for `chat`, in order, from every instance.
    fn received(&self, chat: &str) -> impl Future<Output = Vec<String>> + Send;

    /// Makes the platform refuse the next send as rate limited, asking to wait `retry_after`.
    fn throttle_next_send(&self, retry_after: Duration) -> impl Future<Output = ()> + Send;

    /// Feeds the instance `to` a delivery that is not a message (bytes that do not parse, a
    /// wrong secret) and returns the HTTP status it answered; `None` when the platform has no
    /// such input path (a gateway whose frames the client library parses).
    fn malformed(&self, to: &Arc<dyn Provider>) -> impl Future<Output = Option<u16>> + Send;
}

/// How long something the suite waits for may take before it fails.
const WITHIN: Duration = Duration::from_secs(10);

/// Checks a [`Provider`] against the contract, through its platform stand-in, panicking on the
/// first difference.
///
/// `coordination(replica)` builds the coordination runtime of one replica on a backend shared
/// by the replicas the suite starts (for example `CoordinationConfig::new(MemoryCoordinator::new(
/// hub.clone(), replica)).build()` from `botmesh-coord`); it is used to check that the election
/// honours the provider's exclusive flag.
///
/// Covered: the transport's status through start and stop, and its stream ending on stop;
/// acknowledged inbound (a webhook answers `200` only once the bot took the message, `503`
/// while it cannot, as when the journal write fails, and a redelivery is handled once); send
/// receipts; a rate-limited send
/// sent again once; malformed input answered with a typed `4xx`, the provider working on
/// after it; and an exclusive session running on exactly one of two replicas.
pub async fn provider_conformance(
    harness: &impl ProviderHarness,
    coordination: impl Fn(&str) -> Arc<dyn Coordination>,
) {
    status_follows_start_and_stop(harness).await;
    inbound_is_acknowledged_once_taken(harness).await;
    a_message_the_bot_could_not_journal_is_asked_for_again(harness).await;
    sends_return_receipts_and_rate_limits_are_ridden_out(harness).await;
    malformed_input_is_refused_and_changes_nothing(harness).await;
    the_election_honours_the_exclusive_flag(harness, coordination).await;
}

/// A bot on `provider` that echoes, counting what it handled.
fn echo_bot(provider: Arc<dyn Provider>, handled: &Arc<AtomicUsize>) -> Bot {
    let handled = Arc::clone(handled);
    Bot::builder()
        .provider_arc(provider)
        .on_message(move |ctx| {
            let handled = Arc::clone(&handled);
            async move {
                handled.fetch_add(1, Ordering::SeqCst);
                ctx.reply(format!("echo {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            }
        })
        .build()
        .expect("a bot with one provider builds")
}

/// Waits until `done` holds, failing after [`WITHIN`] with `what`.
async fn eventually<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + WITHIN;
    while !done().await {
        assert!(Instant::now() < deadline, "provider conformance: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn fresh(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

async fn status_follows_start_and_stop(h: &impl ProviderHarness) {
    let provider = h.provider().await;
    assert_eq!(provider.status(), TransportStatus::Closed, "closed before it is started");
    let bot = echo_bot(Arc::clone(&provider), &Arc::default());
    bot.start().await.expect("the provider starts");
    let p = Arc::clone(&provider);
    eventually("the transport opens once started", || {
        let open = p.status() == TransportStatus::Open;
        async move { open }
    })
    .await;
    bot.stop().await.expect("the provider stops");
    assert_eq!(provider.status(), TransportStatus::Closed, "closed once stopped");
    tokio::time::timeout(WITHIN, bot.closed()).await.expect("the inbound stream ends on stop");
}

async fn inbound_is_acknowledged_once_taken(h: &impl ProviderHarness) {
    let provider = h.provider().await;
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = echo_bot(Arc::clone(&provider), &handled);
    bot.start().await.expect("the provider starts");
    let (chat, id) = (fresh("chat"), fresh("m"));
    let answered = h.user_says(&provider, &chat, &id, "hello").await;
    assert!(answered.is_none_or(|s| s == 200), "a taken message is answered 200: {answered:?}");
    eventually("the bot answers the message", || async { !h.received(&chat).await.is_empty() })
        .await;
    // The platform delivers it again (its answer was lost): taken before, so 200, not again.
    let again = h.user_says(&provider, &chat, &id, "hello").await;
    assert!(again.is_none_or(|s| s == 200), "a redelivery is answered 200: {again:?}");
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "a redelivered message is handled once");
    assert_eq!(h.received(&chat).await, ["echo hello"]);
    bot.stop().await.expect("the provider stops");
    // Stopped, this instance cannot take anything: the platform must deliver it elsewhere.
    let refused = h.user_says(&provider, &fresh("chat"), &fresh("m"), "late").await;
    assert!(
        refused.is_none_or(|s| s >= 500 || s == 404),
        "a stopped webhook asks for the message again: {refused:?}"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 1, "nothing was handled once stopped");
}

/// With durability, a webhook answers `200` only once the message is journaled: a journal
/// write that fails is a `503`, and the platform's redelivery is taken and handled once.
async fn a_message_the_bot_could_not_journal_is_asked_for_again(h: &impl ProviderHarness) {
    let provider = h.provider().await;
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handled);
    let bot = Bot::builder()
        .provider_arc(Arc::clone(&provider))
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .durability(Durability::new())
        .on_message(move |ctx| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                ctx.reply(format!("echo {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            }
        })
        .build()
        .expect("a bot with one provider builds");
    bot.start().await.expect("the provider starts");
    let (chat, id) = (fresh("chat"), fresh("m"));
    store.fail_journal_appends(1);
    let Some(refused) = h.user_says(&provider, &chat, &id, "hello").await else {
        // A platform that waits for no answer has nothing to redeliver.
        store.fail_journal_appends(0);
        bot.stop().await.expect("the provider stops");
        return;
    };
    assert_eq!(refused, 503, "not journaled: the platform must deliver it again");
    let taken = h.user_says(&provider, &chat, &id, "hello").await;
    assert_eq!(taken, Some(200), "the redelivery is taken");
    eventually("the bot answers the redelivery", || async { !h.received(&chat).await.is_empty() })
        .await;
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "handled once");
    bot.stop().await.expect("the provider stops");
}

async fn sends_return_receipts_and_rate_limits_are_ridden_out(h: &impl ProviderHarness) {
    let provider = h.provider().await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let bot = Bot::builder()
        .provider_arc(Arc::clone(&provider))
        .on(move |e| {
            if let Event::RateLimited { retry_after, .. } = e {
                seen.lock().unwrap().push(*retry_after);
            }
        })
        .build()
        .expect("a bot with one provider builds");
    bot.start().await.expect("the provider starts");
    bot.ready().await;
    let chat = fresh("chat");
    let to = h.chat_id(&chat);
    let receipt = bot.send(&Outbound::text(to.as_str(), "one")).await.expect("a send succeeds");
    assert!(receipt.id.is_some(), "a send's receipt carries the platform's message id");
    assert_eq!(h.received(&chat).await, ["one"], "the platform received the send");
    h.throttle_next_send(Duration::from_millis(50)).await;
    bot.send(&Outbound::text(to.as_str(), "two")).await.expect("a throttled send goes out");
    assert_eq!(h.received(&chat).await, ["one", "two"], "sent again once, after the wait");
    let waits = events.lock().unwrap().clone();
    // Some platforms count in whole seconds, so the wait may be rounded up.
    assert!(
        waits.len() == 1 && waits[0] >= Duration::from_millis(50),
        "the wait is the platform's retry-after, reported once: {waits:?}"
    );
    bot.stop().await.expect("the provider stops");
}

async fn malformed_input_is_refused_and_changes_nothing(h: &impl ProviderHarness) {
    let provider = h.provider().await;
    let handled = Arc::new(AtomicUsize::new(0));
    let bot = echo_bot(Arc::clone(&provider), &handled);
    bot.start().await.expect("the provider starts");
    for _ in 0..3 {
        if let Some(status) = h.malformed(&provider).await {
            assert!((400..500).contains(&status), "malformed input is a typed 4xx: {status}");
        }
    }
    let chat = fresh("chat");
    let answered = h.user_says(&provider, &chat, &fresh("m"), "still here").await;
    assert!(answered.is_none_or(|s| s == 200), "the provider works on: {answered:?}");
    eventually("the bot answers after malformed input", || async {
        !h.received(&chat).await.is_empty()
    })
    .await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "only the real message reached the bot");
    bot.stop().await.expect("the provider stops");
}

async fn the_election_honours_the_exclusive_flag(
    h: &impl ProviderHarness,
    coordination: impl Fn(&str) -> Arc<dyn Coordination>,
) {
    let replica = fresh("replica");
    let (pa, pb) = (h.provider().await, h.provider().await);
    let exclusive = pa.capabilities().exclusive_session;
    let id = pa.id().to_owned();
    let bot = |provider: Arc<dyn Provider>, name: &str| {
        Bot::builder()
            .provider_arc(provider)
            .coordination(coordination(&format!("{replica}-{name}")))
            .build()
            .expect("a replica builds")
    };
    let (a, b) = (bot(pa, "a"), bot(pb, "b"));
    a.start().await.expect("replica a starts");
    b.start().await.expect("replica b starts");
    let running = || usize::from(a.runs_transport(&id)) + usize::from(b.runs_transport(&id));
    eventually("the transport runs somewhere", || {
        let n = running();
        async move { n >= 1 }
    })
    .await;
    // A standby that would start the transport does so within a campaign period (a third of
    // the lease): give it several, for leases up to a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    match exclusive {
        true => assert_eq!(running(), 1, "an exclusive session runs on one replica"),
        false => assert_eq!(running(), 2, "a shared session runs on every replica"),
    }
    a.stop().await.expect("replica a stops");
    b.stop().await.expect("replica b stops");
}
