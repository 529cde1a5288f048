//! The session: pairing by QR code or pairing code, the lock that refuses a second opener,
//! and acknowledgements that wait for the bot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::{Intake, Provider, Store};
use botmesh_core::{Bot, Durability, MemoryStore, TransportStatus};
use botmesh_testing::FaultyStore;
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_whatsapp_web::{WhatsAppEvent, WhatsAppWebProvider, is_locked};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn an_unlinked_session_prints_and_reports_its_qr_code_and_connects_once_scanned() {
    let network = PhoneNetwork::new().link_by_hand();
    let dir = session_dir();
    let printed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (p, s) = (Arc::clone(&printed), Arc::clone(&seen));
    let provider = WhatsAppWebProvider::with_connector(&dir, network.connector())
        .on_qr(move |code| p.lock().unwrap().push(code.to_owned()))
        .on_event(move |e| s.lock().unwrap().push(e.clone()));
    let bot = echo(Bot::builder().provider(provider.clone()), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    event(&seen, |e| matches!(e, WhatsAppEvent::Qr { .. })).await;
    let shown = printed.lock().unwrap().clone();
    assert_eq!(shown.len(), 1, "the QR code went to the QR handler");
    assert_eq!(provider.status(), TransportStatus::Closed, "not connected before it is scanned");
    assert!(network.link_waiting());
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    event(&seen, |e| matches!(e, WhatsAppEvent::Paired { .. })).await;
    network.user_says("34600000001", "hi");
    assert_eq!(wait_texts(&network, &jid("34600000001"), 1).await, ["echo text hi"]);
    bot.stop().await.unwrap();
    // Linked: the next start connects without a code.
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    assert_eq!(network.codes_shown(), 1);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_session_paired_by_code_reports_the_code() {
    let network = PhoneNetwork::new().link_by_hand();
    let dir = session_dir();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let provider = provider(&network, &dir, &seen).with_pair_code("15550000000");
    let bot = echo(Bot::builder().provider(provider), &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    event(&seen, |e| matches!(e, WhatsAppEvent::PairCode { code } if !code.is_empty())).await;
    assert!(network.link_waiting());
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn the_session_lock_refuses_a_second_opener_until_the_first_stops() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let first = provider(&network, &dir, &Arc::default());
    let second = provider(&network, &dir, &Arc::default())
        .with_session_lock_wait(Duration::from_millis(200));
    let _stream = first.start(Intake::closed("whatsapp-web")).await.unwrap();
    assert!(is_locked(&dir));
    let refused = second.start(Intake::closed("whatsapp-web")).await;
    let error = refused.err().expect("a second opener is refused");
    assert!(error.is_retryable(), "another replica may give it up: {error}");
    assert_eq!(network.sessions_opened(), 1, "the refused one never reached WhatsApp");
    first.stop().await.unwrap();
    assert!(!is_locked(&dir), "stop unlocks");
    assert_eq!(network.openers(&dir), 0, "stop closes the session");
    let _stream = second.start(Intake::closed("whatsapp-web")).await.unwrap();
    assert_eq!(network.max_openers(&dir), 1);
    second.stop().await.unwrap();
}

#[tokio::test]
async fn a_standby_that_finds_the_session_still_held_waits_for_it_and_opens_it() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let first = provider(&network, &dir, &Arc::default());
    let second =
        provider(&network, &dir, &Arc::default()).with_session_lock_wait(Duration::from_secs(30));
    let _stream = first.start(Intake::closed("whatsapp-web")).await.unwrap();
    // The old leader stops a little after the standby was elected.
    let stopper = {
        let first = first.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            first.stop().await.unwrap();
        })
    };
    let _stream = second.start(Intake::closed("whatsapp-web")).await.expect("it waited");
    stopper.await.unwrap();
    assert_eq!(network.max_openers(&dir), 1, "never two at once");
    assert_eq!(network.sessions_opened(), 2);
    second.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_the_bot_cannot_take_yet_holds_the_session_and_is_handled_once_in_order() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let handled = Arc::new(AtomicUsize::new(0));
    let provider =
        provider(&network, &dir, &Arc::default()).with_intake_patience(Duration::from_millis(200));
    let builder = Bot::builder()
        .provider(provider)
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .durability(Durability::new());
    let bot = echo(builder, &handled).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    // The journal refuses every write for now: the intake answers Unavailable.
    store.fail_journal_appends(u32::MAX);
    let first = network.user_says("34600000001", "hi");
    let second = network.user_says("34600000001", "again");
    // Well past the patience: the message is still being offered, the session waits.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(network.refusals(), 0, "not refused: no redelivery behind newer messages");
    assert_eq!(network.pending(), 2, "not acknowledged: WhatsApp keeps both");
    assert!(network.acknowledged().is_empty());
    assert_eq!(handled.load(Ordering::SeqCst), 0);
    store.fail_journal_appends(0);
    let texts = wait_texts(&network, &jid("34600000001"), 2).await;
    assert_eq!(texts, ["echo text hi", "echo text again"], "in the order they came");
    until("both were acknowledged", || network.acknowledged() == [first.clone(), second.clone()])
        .await;
    assert_eq!(network.deliveries(), 2, "each delivered once");
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 2, "each handled once");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_waiting_for_the_bot_at_stop_is_not_acknowledged_and_comes_again() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let handled = Arc::new(AtomicUsize::new(0));
    let provider =
        provider(&network, &dir, &Arc::default()).with_intake_patience(Duration::from_millis(200));
    let builder = Bot::builder()
        .provider(provider)
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .durability(Durability::new());
    let bot = echo(builder, &handled).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    store.fail_journal_appends(u32::MAX);
    let id = network.user_says("34600000001", "hi");
    until("the session delivered it", || network.deliveries() == 1).await;
    // The replica steps down while the message waits for the bot.
    bot.stop().await.unwrap();
    until("the stop left its batch unacknowledged", || network.refusals() == 1).await;
    assert_eq!(network.pending(), 1, "WhatsApp keeps it");
    assert!(network.acknowledged().is_empty());
    store.fail_journal_appends(0);
    // The next opener (here the same replica, elected again) gets it.
    bot.start().await.unwrap();
    assert_eq!(wait_texts(&network, &jid("34600000001"), 1).await, ["echo text hi"]);
    until("the redelivery was acknowledged", || network.acknowledged() == [id.clone()]).await;
    assert_eq!(network.deliveries(), 2, "delivered twice");
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "handled once");
    bot.stop().await.unwrap();
}
