//! What the tests share: the provider on the stand-in, an echo bot, waits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::Coordination;
use botmesh_core::{BotBuilder, BotError, Button, Event, OutboundContent};
use botmesh_discord::DiscordProvider;
use botmesh_testing::discord::DiscordServer;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use tokio::time::Instant;

pub(crate) const LEASE: Duration = Duration::from_secs(1);
pub(crate) const WITHIN: Duration = Duration::from_secs(15);

/// A provider on the stand-in. A replica that stalls has a third of [`LEASE`] (333 ms) to let
/// the gateway go before a standby may connect, so its stop waits 150 ms at most for a clean
/// close before it drops the connection.
pub(crate) fn discord(server: &DiscordServer) -> DiscordProvider {
    DiscordProvider::new(server.token(), DiscordProvider::default_intents())
        .with_proxy(server.url())
        .with_close_timeout(Duration::from_millis(150))
}

/// An echo bot that counts what it handled; "menu" is answered with two buttons.
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

/// Waits until the bot sent `n` messages to `channel`, and returns their texts.
pub(crate) async fn wait_texts(server: &DiscordServer, channel: u64, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let texts = server.sent_texts(channel);
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "channel {channel} got {texts:?}, wanted {n}");
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

/// Waits until the bot reported an event `wanted` matches.
pub(crate) async fn event(events: &Arc<Mutex<Vec<Event>>>, wanted: impl Fn(&Event) -> bool) {
    event_within(events, WITHIN, wanted).await;
}

/// Waits up to `within` until the bot reported an event `wanted` matches.
pub(crate) async fn event_within(
    events: &Arc<Mutex<Vec<Event>>>,
    within: Duration,
    wanted: impl Fn(&Event) -> bool,
) {
    let deadline = Instant::now() + within;
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
