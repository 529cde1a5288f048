//! The session kept in the bot's store (`Session::Store`) on the phone network stand-in: the
//! store's lock refuses a second opener, and with three replicas and no shared directory the
//! one that takes over connects on the same linked device, without pairing again.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::{Intake, Provider, Store};
use botmesh_core::{Bot, Durability, MemoryStore, TransportStatus};
use botmesh_testing::FaultyStore;
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use botmesh_whatsapp_web::seam::{WaConnector, WaOpen, WaSession};
use botmesh_whatsapp_web::{Session, WhatsAppEvent, WhatsAppWebProvider};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

const ID: &str = "whatsapp-web";

/// The provider on `network`, its session in the bot's store.
fn in_store(network: &PhoneNetwork, seen: &Arc<Mutex<Vec<WhatsAppEvent>>>) -> WhatsAppWebProvider {
    let seen = Arc::clone(seen);
    WhatsAppWebProvider::with_connector(Session::Store, network.connector())
        .with_session_lock_ttl(LEASE)
        .on_qr(|_| {})
        .on_event(move |e| seen.lock().unwrap().push(e.clone()))
}

#[tokio::test]
async fn the_store_s_lock_refuses_a_second_opener_and_a_bot_without_a_store_cannot_open_it() {
    let network = PhoneNetwork::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let first = in_store(&network, &Arc::default());
    let second = in_store(&network, &Arc::default());
    let intake = || Intake::closed(ID).with_store(Arc::clone(&store));
    let _stream = first.start(intake()).await.unwrap();
    let refused = second.start(intake()).await.err().expect("a second opener is refused");
    assert!(refused.is_retryable(), "the first may give it up: {refused}");
    assert_eq!(network.sessions_opened(), 1, "the refused one never reached WhatsApp");
    first.stop().await.unwrap();
    assert_eq!(network.store_openers(ID), 0, "stop closes the session");
    let _stream = second.start(intake()).await.unwrap();
    until("the second connects", || network.connected()).await;
    assert_eq!((network.codes_shown(), network.max_store_openers(ID)), (1, 1), "paired once");
    second.stop().await.unwrap();
    let alone = in_store(&network, &Arc::default());
    let error = alone.start(Intake::closed(ID)).await.err().expect("no store, no session");
    assert!(error.to_string().contains("open the session"), "{error}");
}

#[tokio::test]
async fn a_leader_whose_lock_in_the_store_was_lost_disconnects_and_a_new_opener_gets_the_session() {
    let network = PhoneNetwork::new();
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let store: Arc<dyn Store> = Arc::clone(&faulty) as _;
    let stale =
        in_store(&network, &Arc::default()).with_session_lock_ttl(Duration::from_millis(300));
    let _stream = stale.start(Intake::closed(ID).with_store(Arc::clone(&store))).await.unwrap();
    until("connected", || network.connected()).await;
    // The lock ran out under it (a stalled leader): its next renewal is refused.
    faulty.refuse_lock_renewals(1);
    until("the stale leader disconnected", || network.store_openers(ID) == 0).await;
    assert_eq!(stale.status(), TransportStatus::Closed, "its transport is closed: it steps down");
    stale.stop().await.unwrap();
    let next = in_store(&network, &Arc::default());
    let _stream = next.start(Intake::closed(ID).with_store(Arc::clone(&store))).await.unwrap();
    until("the next opener connects", || network.connected()).await;
    assert_eq!((network.codes_shown(), network.max_store_openers(ID)), (1, 1));
    next.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_session_through_the_store_and_a_standby_takes_over_paired() {
    let network = PhoneNetwork::new();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(in_store(&network, &seen))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let leader = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().position(|(_, b)| b.runs_transport(ID))
    };
    until("a replica opens the session", || leader(&replicas).is_some() && network.connected())
        .await;
    event(&seen, |e| matches!(e, WhatsAppEvent::Paired { .. })).await;
    assert_eq!(network.codes_shown(), 1, "the first leader paired the device");
    network.user_says("34600000001", "before");
    wait_texts(&network, &jid("34600000001"), 1).await;

    let old = leader(&replicas).unwrap();
    let t0 = Instant::now();
    replicas[old].0.crash();
    network.user_says("34600000001", "after");
    until("a standby opens the session", || network.sessions_opened() == 2).await;
    let took_over = t0.elapsed();
    assert!(
        took_over <= LEASE + LEASE / 3 + TAKEOVER_SLACK,
        "a standby opened the session after {took_over:?}"
    );
    let texts = wait_texts(&network, &jid("34600000001"), 2).await;
    assert_eq!(texts, ["echo text before", "echo text after"]);
    assert_eq!(network.codes_shown(), 1, "the standby found the device linked: no pairing");
    assert_eq!(network.max_store_openers(ID), 1, "never two openers of the session at once");
    for (i, (_, bot)) in replicas.iter().enumerate() {
        if i != old {
            bot.stop().await.unwrap();
        }
    }
}

/// Opens sessions on the network, slowly: the session is open only after `delay`, its
/// `Connected` already queued.
struct Slow {
    network: PhoneNetwork,
    delay: Duration,
}

#[botmesh_traits::async_trait]
impl WaConnector for Slow {
    async fn open(&self, open: WaOpen) -> botmesh_whatsapp_web::Result<WaSession> {
        let session = self.network.connector().open(open).await?;
        tokio::time::sleep(self.delay).await;
        Ok(session)
    }
}

#[tokio::test]
async fn a_lock_lost_while_the_session_opened_closes_it_and_the_transport_never_opens() {
    let network = PhoneNetwork::new();
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let store: Arc<dyn Store> = Arc::clone(&faulty) as _;
    let ttl = Duration::from_millis(300);
    let slow = Slow { network: network.clone(), delay: ttl * 2 };
    let stale = WhatsAppWebProvider::with_connector(Session::Store, slow)
        .with_session_lock_ttl(ttl)
        .on_qr(|_| {});
    // The lock runs out under it while it connects: its first renewal is refused.
    faulty.refuse_lock_renewals(1);
    let opened = stale.start(Intake::closed(ID).with_store(Arc::clone(&store))).await;
    assert!(opened.is_err(), "it no longer holds the session: it does not keep it open");
    until("the session it opened was closed", || network.store_openers(ID) == 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stale.status(), TransportStatus::Closed, "its queued Connected changed nothing");
    stale.stop().await.unwrap();
}
