//! What the tests share: the provider on the stand-in, an echo bot, waits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::Coordination;
use botmesh_core::{BotBuilder, BotError, Button, Event, OutboundContent};
use botmesh_telegram::TelegramProvider;
use botmesh_testing::telegram::TelegramServer;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use tokio::time::Instant;

pub(crate) const TOKEN: &str = "123456:test-token";
pub(crate) const LEASE: Duration = Duration::from_secs(1);
pub(crate) const WITHIN: Duration = Duration::from_secs(15);

pub(crate) fn polling(server: &TelegramServer) -> TelegramProvider {
    TelegramProvider::polling(TOKEN)
        .with_api_url(server.api_url().parse().unwrap())
        .with_poll_timeout(Duration::from_secs(1))
}

/// An echo bot that counts what it handled.
pub(crate) fn echo(builder: BotBuilder, handled: &Arc<AtomicUsize>) -> BotBuilder {
    let handled = Arc::clone(handled);
    builder.on_message(move |ctx| {
        let handled = Arc::clone(&handled);
        async move {
            handled.fetch_add(1, Ordering::SeqCst);
            if ctx.body() == "menu" {
                let buttons = vec![Button::new("yes", "Yes please"), Button::new("no", "No")];
                let content = OutboundContent::Buttons { body: "Sure?".into(), buttons };
                ctx.send_message(&botmesh_core::Outbound::new(ctx.chat().clone(), content)).await?;
                return Ok(());
            }
            let kind = ctx.message().inbound.content.type_name();
            ctx.reply(format!("echo {kind} {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        }
    })
}

pub(crate) async fn wait_texts(server: &TelegramServer, chat: i64, n: usize) -> Vec<String> {
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

/// Waits until `bot` reported an event `wanted` matches.
pub(crate) async fn event(events: &Arc<Mutex<Vec<Event>>>, wanted: impl Fn(&Event) -> bool) {
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
