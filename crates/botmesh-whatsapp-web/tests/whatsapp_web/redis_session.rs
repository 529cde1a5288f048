//! The session kept in Redis survives a leader change without re-pairing: two provider
//! instances on one private Redis, the session's storage being whatsapp-rust's own device
//! loading (its `Bot`'s start, its `PersistenceManager`) and its store traits on the crate's
//! `StoreBackend`.
//!
//! WhatsApp's servers cannot be reached from tests, so the connector here stands in for the
//! network only: it opens the session's storage as the real connector does, shows a QR code
//! when the device is not linked, and plays the phone linking it, which leaves the device and
//! its first Signal and app-state entries in the store through whatsapp-rust's `Backend`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError};
use botmesh_redis_store::RedisStore;
use botmesh_testing::RedisServer;
use botmesh_traits::{Bytes, async_trait};
use botmesh_whatsapp_web::rust::StoreBackend;
use botmesh_whatsapp_web::seam::{
    WaClient, WaConnector, WaEvent, WaMedia, WaOpen, WaOutgoing, WaSession, store_prefix,
};
use botmesh_whatsapp_web::{Error, Result, Session, WhatsAppEvent, WhatsAppWebProvider};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::PersistenceManager;
use whatsapp_rust::wacore::store::traits::{AppStateSyncKey, Backend};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

const BOT: &str = "15550000000@s.whatsapp.net";
const ANA: &str = "34600000001@s.whatsapp.net";

/// What each open found in the store.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    /// The linked number whatsapp-rust's own start (its `Bot`) loads from the store.
    library_sees: Option<String>,
    linked: Option<String>,
    registration_id: u32,
    identity: Option<[u8; 32]>,
    session: Option<Bytes>,
    prekey: Option<Bytes>,
    max_prekey: u32,
    sync_key: Option<Vec<u8>>,
    version: u64,
    mac: Option<Vec<u8>>,
}

async fn found(backend: &Arc<dyn Backend>, manager: &PersistenceManager) -> Result<Found> {
    let e = |e| Error::client("read the session", e);
    let device = manager.get_device_snapshot().await;
    let library = whatsapp_rust::prelude::Bot::builder()
        .with_backend_arc(Arc::clone(backend))
        .build()
        .await
        .map_err(|e| Error::client("start whatsapp-rust", e))?;
    let library_sees = library.client().persistence_manager().get_device_snapshot().pn.clone();
    drop(library);
    Ok(Found {
        library_sees: library_sees.map(|j| j.to_string()),
        linked: device.pn.map(|j| j.to_string()),
        registration_id: device.registration_id,
        identity: backend.load_identity(ANA).await.map_err(e)?,
        session: backend.get_session(ANA).await.map_err(e)?,
        prekey: backend.load_prekey(7).await.map_err(e)?,
        max_prekey: backend.get_max_prekey_id().await.map_err(e)?,
        sync_key: backend.get_sync_key(b"key-1").await.map_err(e)?.map(|k| k.key_data),
        version: backend.get_version("regular").await.map_err(e)?.version,
        mac: backend.get_mutation_mac("regular", &[1; 32]).await.map_err(e)?,
    })
}

/// The phone links the device: the library records it, and its first keys.
async fn link(backend: &Arc<dyn Backend>, manager: &PersistenceManager) -> Result<()> {
    let e = |e| Error::client("pair", e);
    let bot = BOT.parse().map_err(|_| Error::InvalidInput { reason: "jid".into() })?;
    manager
        .modify_device(|device| {
            device.pn = Some(bot);
            device.push_name = "Shop".to_owned();
        })
        .await;
    backend.save(&manager.get_device_snapshot().await).await.map_err(e)?;
    backend.put_identity(ANA, [9; 32]).await.map_err(e)?;
    backend.put_session(ANA, b"ratchet").await.map_err(e)?;
    backend.store_prekeys_batch(&[(7, Bytes::from_static(b"pk7"))], true).await.map_err(e)?;
    let key = AppStateSyncKey { key_data: vec![4, 2], fingerprint: vec![1], timestamp: 1 };
    backend.set_sync_key(b"key-1", key).await.map_err(e)?;
    let state = HashState { version: 3, ..HashState::default() };
    backend.set_version("regular", state).await.map_err(e)?;
    let mac = AppStateMutationMAC { index_mac: vec![1; 32], value_mac: vec![5] };
    backend.put_mutation_macs("regular", 3, &[mac]).await.map_err(e)
}

/// Opens the session's storage in the bot's store, pairs it if it is not linked.
#[derive(Clone, Default)]
struct Linker {
    opens: Arc<Mutex<Vec<Found>>>,
}

#[async_trait]
impl WaConnector for Linker {
    async fn open(&self, open: WaOpen) -> Result<WaSession> {
        assert_eq!(open.session, Session::Store);
        let store = open.store.clone().ok_or(Error::NoStore)?;
        let backend: Arc<dyn Backend> =
            Arc::new(StoreBackend::new(store, open.store_prefix(), open.guard.clone()));
        let manager = PersistenceManager::new(Arc::clone(&backend))
            .await
            .map_err(|e| Error::client("load the device", e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let before = found(&backend, &manager).await?;
        if before.linked.is_none() {
            let _ = tx.send(WaEvent::Qr {
                code: "2@ref,noise,identity,adv".into(),
                valid_for: Duration::from_secs(20),
            });
            link(&backend, &manager).await?;
            let _ = tx.send(WaEvent::Paired { me: BOT.to_owned() });
        }
        let _ = tx.send(WaEvent::Connected);
        self.opens.lock().unwrap().push(before);
        let events =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
            );
        Ok(WaSession::new(Arc::new(Idle(Mutex::new(Some(tx)))), Box::pin(events.boxed())))
    }
}

/// A connected session nobody writes to; closing it ends its events.
struct Idle(Mutex<Option<mpsc::UnboundedSender<WaEvent>>>);

#[async_trait]
impl WaClient for Idle {
    async fn send(&self, _: WaOutgoing) -> Result<String> {
        Err(Error::NotConnected)
    }

    async fn download(&self, _: &WaMedia) -> Result<Bytes> {
        Err(Error::NotConnected)
    }

    async fn close(&self) {
        self.0.lock().unwrap().take();
    }
}

async fn instance(server: &RedisServer, linker: &Linker) -> (Bot, Arc<Mutex<Vec<WhatsAppEvent>>>) {
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&server.url(), "shop").await.unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let provider = WhatsAppWebProvider::with_connector(Session::Store, linker.clone())
        .on_qr(|_| {})
        .on_event(move |e| kept.lock().unwrap().push(e.clone()));
    let bot = Bot::builder()
        .provider(provider)
        .store(store)
        .on_message(|_| async { Ok::<_, BotError>(()) })
        .build()
        .unwrap();
    (bot, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_kept_in_redis_survives_a_leader_change_without_re_pairing() {
    let server = RedisServer::start().unwrap();
    let linker = Linker::default();

    let (a, seen_a) = instance(&server, &linker).await;
    a.start().await.unwrap();
    tokio::time::timeout(WITHIN, a.ready()).await.unwrap();
    event(&seen_a, |e| matches!(e, WhatsAppEvent::Paired { .. })).await;
    assert!(seen_a.lock().unwrap().iter().any(|e| matches!(e, WhatsAppEvent::Qr { .. })));
    a.stop().await.unwrap();

    let (b, seen_b) = instance(&server, &linker).await;
    b.start().await.unwrap();
    tokio::time::timeout(WITHIN, b.ready()).await.unwrap();
    event(&seen_b, |e| matches!(e, WhatsAppEvent::Connected)).await;
    let pairing =
        |e: &WhatsAppEvent| matches!(e, WhatsAppEvent::Qr { .. } | WhatsAppEvent::Paired { .. });
    assert!(!seen_b.lock().unwrap().iter().any(pairing), "B asked for no pairing");
    b.stop().await.unwrap();

    let opens = linker.opens.lock().unwrap().clone();
    let [first, second] = opens.as_slice() else { panic!("two opens: {opens:?}") };
    assert_eq!(first.linked, None, "A found no device");
    assert_eq!(second.linked.as_deref(), Some(BOT), "B found the device linked");
    assert_eq!(second.library_sees.as_deref(), Some(BOT), "so does whatsapp-rust's own start");
    assert_eq!(first.library_sees, None);
    assert_eq!(second.registration_id, first.registration_id, "the same device, not a new one");
    assert_eq!(second.identity, Some([9; 32]));
    assert_eq!(second.session.as_deref(), Some(&b"ratchet"[..]));
    assert_eq!((second.prekey.as_deref(), second.max_prekey), (Some(&b"pk7"[..]), 7));
    assert_eq!((second.sync_key.clone(), second.version), (Some(vec![4, 2]), 3));
    assert_eq!(second.mac, Some(vec![5]));
    // The rows are in Redis, under the provider's prefix.
    let raw = RedisStore::new(&server.url(), "shop").await.unwrap();
    let key = format!("{}device:self", store_prefix("whatsapp-web"));
    assert!(raw.get_checkpoint(&key).await.unwrap().is_some(), "the device's row is in Redis");
}
