//! The stand-in driven through the seam directly: pairing, delivery and acknowledgement,
//! replacement, log-out.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::time::Duration;

use botmesh_whatsapp_web::seam::{WaConnector, WaEvent, WaOpen, WaPairing, WaSession};
use futures_util::StreamExt;

use super::*;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("botmesh-phone-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn open(network: &PhoneNetwork, dir: &Path) -> WaSession {
    let request = WaOpen::new(dir, WaPairing::Qr, "whatsapp-web");
    network.connector().open(request).await.unwrap()
}

async fn next(session: &mut WaSession) -> WaEvent {
    tokio::time::timeout(Duration::from_secs(5), session.events.next()).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_new_directory_pairs_once_and_a_later_session_on_it_connects_without_a_code() {
    let network = PhoneNetwork::new().link_by_hand();
    let dir = temp_dir("pair");
    let mut first = open(&network, &dir).await;
    assert!(matches!(next(&mut first).await, WaEvent::Qr { .. }));
    assert!(network.link_waiting());
    assert!(matches!(next(&mut first).await, WaEvent::Paired { .. }));
    assert!(matches!(next(&mut first).await, WaEvent::Connected));
    first.client.close().await;
    assert!(first.events.next().await.is_none(), "a closed session's events end");
    let mut second = open(&network, &dir).await;
    assert!(matches!(next(&mut second).await, WaEvent::Connected));
    assert_eq!((network.codes_shown(), network.sessions_opened()), (1, 2));
    assert_eq!(network.max_openers(&dir), 1);
}

#[tokio::test]
async fn a_refused_message_stays_queued_and_comes_again_after_a_reconnect() {
    let network = PhoneNetwork::new();
    let dir = temp_dir("ack");
    let mut session = open(&network, &dir).await;
    while !matches!(next(&mut session).await, WaEvent::Connected) {}
    let id = network.user_says("34600", "hi");
    let WaEvent::Messages { messages, ack } = next(&mut session).await else { panic!() };
    assert_eq!(messages[0].key.id, id);
    ack.refuse();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((network.pending(), network.refusals()), (1, 1));
    network.reconnect();
    assert!(matches!(next(&mut session).await, WaEvent::Disconnected { reconnecting: true }));
    assert!(matches!(next(&mut session).await, WaEvent::Connected));
    let WaEvent::Messages { messages, ack } = next(&mut session).await else { panic!() };
    assert_eq!(messages[0].key.id, id, "delivered again");
    ack.accept();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((network.pending(), network.acknowledged()), (0, vec![id]));
}

#[tokio::test]
async fn a_second_session_replaces_the_first_and_a_removed_device_is_logged_out() {
    let network = PhoneNetwork::new();
    let (a, b) = (temp_dir("a"), temp_dir("b"));
    let mut first = open(&network, &a).await;
    while !matches!(next(&mut first).await, WaEvent::Connected) {}
    let mut second = open(&network, &b).await;
    while !matches!(next(&mut second).await, WaEvent::Connected) {}
    assert!(matches!(next(&mut first).await, WaEvent::Replaced));
    network.log_out();
    assert!(matches!(next(&mut second).await, WaEvent::LoggedOut { .. }));
    second.client.close().await;
    let mut again = open(&network, &b).await;
    assert!(matches!(next(&mut again).await, WaEvent::LoggedOut { .. }), "its device is gone");
}
