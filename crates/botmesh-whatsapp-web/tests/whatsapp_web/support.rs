//! What the tests share: the provider on the stand-in, an echo bot, waits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::Coordination;
use botmesh_core::{BotBuilder, BotError, Event};
use botmesh_testing::whatsapp_web::PhoneNetwork;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use botmesh_whatsapp_web::{WhatsAppEvent, WhatsAppWebProvider};
use tokio::time::Instant;

/// The replicas' lease: long enough that a loaded two-core machine's scheduling is small
/// beside it.
pub(crate) const LEASE: Duration = Duration::from_secs(2);
/// What a takeover may take beyond `lease + lease / 3`: the memory hub's clock, the runtime
/// noticing the election, the old leader's stop, and tasks waiting for one of two worker
/// threads on a loaded machine. Not the lease's doing: the bound checked is the lease's.
pub(crate) const TAKEOVER_SLACK: Duration = Duration::from_secs(1);
pub(crate) const WITHIN: Duration = Duration::from_secs(15);

/// A fresh session directory, removed when the test's process ends (temp dir).
pub(crate) fn session_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("botmesh-wa-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The provider on `network`, its session in `dir`, its events recorded in `seen`.
pub(crate) fn provider(
    network: &PhoneNetwork,
    dir: &std::path::Path,
    seen: &Arc<Mutex<Vec<WhatsAppEvent>>>,
) -> WhatsAppWebProvider {
    let seen = Arc::clone(seen);
    WhatsAppWebProvider::with_connector(dir, network.connector())
        .on_qr(|_| {})
        .on_event(move |e| seen.lock().unwrap().push(e.clone()))
}

/// An echo bot that counts what it handled: `echo <kind> <text>`. A message counts once its
/// reply went out: a run whose reply failed (a replica whose transport closed under it) is
/// retried by the runtime, and is not a second handling.
pub(crate) fn echo(builder: BotBuilder, handled: &Arc<AtomicUsize>) -> BotBuilder {
    let handled = Arc::clone(handled);
    builder.on_message(move |ctx| {
        let handled = Arc::clone(&handled);
        async move {
            let kind = ctx.message().inbound.content.type_name();
            ctx.reply(format!("echo {kind} {}", ctx.body())).await?;
            handled.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BotError>(())
        }
    })
}

pub(crate) async fn wait_texts(network: &PhoneNetwork, chat: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let texts = network.sent_texts(chat);
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "{chat} got {texts:?}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `done` holds, failing with `what` after [`WITHIN`].
pub(crate) async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) fn replica(
    hub: &MemoryCoordinationHub,
    id: &str,
) -> (Arc<MemoryCoordinator>, Arc<dyn Coordination>) {
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
    // A crashed replica's stop gives up on its queues after `settle`, not the default minute.
    let coordination = CoordinationConfig::new(Arc::clone(&coordinator))
        .settle(Duration::from_secs(2))
        .turn_wait(Duration::from_secs(10))
        .build();
    (coordinator, coordination)
}

/// Waits until `events` holds one that `wanted` matches.
pub(crate) async fn event<T: std::fmt::Debug>(
    events: &Arc<Mutex<Vec<T>>>,
    wanted: impl Fn(&T) -> bool,
) {
    let deadline = Instant::now() + WITHIN;
    while !events.lock().unwrap().iter().any(&wanted) {
        assert!(Instant::now() < deadline, "never saw the event: {:?}", events.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn recorded(builder: BotBuilder) -> (BotBuilder, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&events);
    (builder.on(move |e| kept.lock().unwrap().push(e.clone())), events)
}
