//! The backend's semantics on botmesh's `MemoryStore`, entry by entry beside whatsapp-rust's
//! own `InMemoryBackend`; what survives a new opener; what a lost lock refuses; and what a
//! message costs in store calls.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;

use botmesh_core::MemoryStore;
use botmesh_testing::FaultyStore;
use botmesh_traits::{Bytes, Store};
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::InMemoryBackend;
use whatsapp_rust::wacore::store::traits::{
    AppStateSyncKey, AppSyncStore, Backend, DeviceInfo, DeviceListRecord, DeviceStore,
    LidPnMappingEntry, MsgSecretEntry, MsgSecretStore, PendingInboundKey, PendingInboundRow,
    ProtocolStore, SignalStore, TcTokenEntry,
};

use super::StoreBackend;
use crate::seam::SessionGuard;

const PREFIX: &str = "botmesh:provider:wa:session:";

fn backend(store: &Arc<dyn Store>) -> StoreBackend {
    StoreBackend::new(Arc::clone(store), PREFIX, SessionGuard::new())
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Every store trait's put, get, list, delete and expiry, on `backend`: what it saw, as
/// lines, to compare between backends.
async fn exercise(backend: &dyn Backend) -> Vec<String> {
    let mut seen = Vec::new();
    let mut saw = |what: &str, value: String| seen.push(format!("{what}: {value}"));
    let ana = "34600000001@s.whatsapp.net";
    let ana_1 = "34600000001:1@s.whatsapp.net";

    // Signal.
    backend.put_identity(ana, [7; 32]).await.unwrap();
    saw("identity", format!("{:?}", backend.load_identity(ana).await.unwrap()));
    backend.delete_identity(ana).await.unwrap();
    saw("identity gone", format!("{:?}", backend.load_identity(ana).await.unwrap()));
    let sessions = [(Arc::from(ana), b("s0")), (Arc::from(ana_1), b("s1"))];
    backend.put_sessions_batch(&sessions).await.unwrap();
    backend.put_session(ana, b"s0'").await.unwrap();
    saw("session", format!("{:?}", backend.get_session(ana).await.unwrap()));
    saw("has session", format!("{:?}", backend.has_session(ana_1).await.unwrap()));
    backend.delete_session(ana_1).await.unwrap();
    saw("session gone", format!("{:?}", backend.has_session(ana_1).await.unwrap()));
    backend.store_prekeys_batch(&[(5, b("p5")), (9, b("p9"))], false).await.unwrap();
    backend.store_prekey(3, b"p3", true).await.unwrap();
    backend.mark_prekeys_uploaded(&[5, 9]).await.unwrap();
    saw("prekeys", format!("{:?}", backend.load_prekeys_batch(&[3, 4, 5, 9]).await.unwrap()));
    saw("max prekey", backend.get_max_prekey_id().await.unwrap().to_string());
    backend.remove_prekey(5).await.unwrap();
    saw("prekey gone", format!("{:?}", backend.load_prekey(5).await.unwrap()));
    backend.store_signed_prekey(1, b"sp1").await.unwrap();
    backend.store_signed_prekey(2, b"sp2").await.unwrap();
    backend.remove_signed_prekey(1).await.unwrap();
    saw("signed", format!("{:?}", sorted(backend.load_all_signed_prekeys().await.unwrap())));
    saw("signed 2", format!("{:?}", backend.load_signed_prekey(2).await.unwrap()));
    backend.put_sender_key("120363@g.us::ana", b"sk").await.unwrap();
    saw("sender key", format!("{:?}", backend.get_sender_key("120363@g.us::ana").await.unwrap()));
    backend.delete_sender_key("120363@g.us::ana").await.unwrap();
    saw(
        "sender key gone",
        format!("{:?}", backend.get_sender_key("120363@g.us::ana").await.unwrap()),
    );

    // App-state sync.
    let key = AppStateSyncKey { key_data: vec![1, 2], fingerprint: vec![3], timestamp: 42 };
    backend.set_sync_key(b"k1", key.clone()).await.unwrap();
    backend.set_sync_key(b"k2", key).await.unwrap();
    saw("sync key", format!("{:?}", backend.get_sync_key(b"k1").await.unwrap()));
    saw("latest sync key", format!("{:?}", backend.get_latest_sync_key_id().await.unwrap()));
    saw("no version", backend.get_version("regular").await.unwrap().version.to_string());
    let mut state = HashState { version: 12, ..HashState::default() };
    state.hash[0] = 9;
    state.index_value_map.insert("i".into(), vec![4]);
    backend.set_version("regular", state).await.unwrap();
    let state = backend.get_version("regular").await.unwrap();
    saw("version", format!("{} {} {:?}", state.version, state.hash[0], state.index_value_map));
    let mac = |i: u8, v: u8| AppStateMutationMAC { index_mac: vec![i; 32], value_mac: vec![v] };
    backend.put_mutation_macs("regular", 12, &[mac(1, 10), mac(2, 20), mac(3, 30)]).await.unwrap();
    backend.put_mutation_macs("other", 1, &[mac(1, 11)]).await.unwrap();
    backend.delete_mutation_macs("regular", &[vec![1; 32]]).await.unwrap();
    let some = sorted(
        backend
            .get_mutation_macs("regular", &[[1; 32], [2; 32]])
            .await
            .unwrap()
            .into_iter()
            .collect(),
    );
    saw("macs", format!("{some:?}"));
    backend.clear_mutation_macs("regular").await.unwrap();
    saw(
        "macs cleared",
        format!("{:?}", backend.get_mutation_mac("regular", &[3; 32]).await.unwrap()),
    );
    saw("other macs", format!("{:?}", backend.get_mutation_mac("other", &[1; 32]).await.unwrap()));

    // Protocol.
    backend
        .set_sender_key_status("g1@g.us", &[("a:1@lid", true), ("b:2@lid", false)])
        .await
        .unwrap();
    backend.set_sender_key_status("g2@g.us", &[("a:1@lid", true)]).await.unwrap();
    backend.delete_sender_key_device_rows(&["a:1@lid"]).await.unwrap();
    saw(
        "skd g1",
        format!("{:?}", sorted(backend.get_sender_key_devices("g1@g.us").await.unwrap())),
    );
    saw("skd g2", format!("{:?}", backend.get_sender_key_devices("g2@g.us").await.unwrap()));
    backend.set_sender_key_status("g2@g.us", &[("c:3@lid", true)]).await.unwrap();
    backend.clear_sender_key_devices("g1@g.us").await.unwrap();
    saw(
        "skd g1 cleared",
        format!("{:?}", backend.get_sender_key_devices("g1@g.us").await.unwrap()),
    );
    backend.clear_all_sender_key_devices().await.unwrap();
    saw(
        "skd all cleared",
        format!("{:?}", backend.get_sender_key_devices("g2@g.us").await.unwrap()),
    );
    let mapping = |lid: &str, pn: &str| LidPnMappingEntry {
        lid: lid.into(),
        phone_number: pn.into(),
        created_at: 1,
        updated_at: 2,
        learning_source: "usync".into(),
    };
    backend.put_lid_mapping(&mapping("100", "346001")).await.unwrap();
    backend.put_lid_mapping(&mapping("100", "346002")).await.unwrap();
    backend.put_lid_mappings(&[mapping("200", "346003")]).await.unwrap();
    saw(
        "lid",
        format!("{:?}", backend.get_lid_mapping("100").await.unwrap().map(|m| m.phone_number)),
    );
    saw("old pn", format!("{:?}", backend.get_pn_mapping("346001").await.unwrap().map(|m| m.lid)));
    saw("new pn", format!("{:?}", backend.get_pn_mapping("346002").await.unwrap().map(|m| m.lid)));
    let all = backend.get_all_lid_mappings().await.unwrap();
    saw("all lids", format!("{:?}", sorted(all.into_iter().map(|m| m.lid).collect())));
    backend.save_base_key(ana, "M1", b"base").await.unwrap();
    saw("same base", format!("{:?}", backend.has_same_base_key(ana, "M1", b"base").await.unwrap()));
    saw(
        "other base",
        format!("{:?}", backend.has_same_base_key(ana, "M1", b"else").await.unwrap()),
    );
    backend.delete_base_key(ana, "M1").await.unwrap();
    saw("base gone", format!("{:?}", backend.has_same_base_key(ana, "M1", b"base").await.unwrap()));
    let record = DeviceListRecord {
        user: "346001".into(),
        devices: vec![DeviceInfo::new(0, None), DeviceInfo::new(3, Some(1))],
        timestamp: 5,
        phash: Some("h".into()),
        raw_id: Some(8),
    };
    backend.update_device_list(record).await.unwrap();
    let devices = backend.get_devices("346001").await.unwrap().unwrap();
    saw(
        "devices",
        format!(
            "{:?} {:?}",
            devices.devices.iter().map(|d| d.device_id).collect::<Vec<_>>(),
            devices.raw_id
        ),
    );
    backend.delete_devices("346001").await.unwrap();
    saw("devices gone", format!("{:?}", backend.get_devices("346001").await.unwrap().is_some()));
    backend.put_group_metadata("g1@g.us", b"meta").await.unwrap();
    saw("group", format!("{:?}", backend.get_group_metadata("g1@g.us").await.unwrap()));
    backend.delete_group_metadata("g1@g.us").await.unwrap();
    saw("group gone", format!("{:?}", backend.get_group_metadata("g1@g.us").await.unwrap()));
    let token = |t: &[u8], at, sender| TcTokenEntry {
        token: t.to_vec(),
        token_timestamp: at,
        sender_timestamp: sender,
    };
    backend.put_tc_token("a@lid", &token(b"t", 100, None)).await.unwrap();
    backend.put_tc_token("b@lid", &token(b"t", 10, Some(500))).await.unwrap();
    backend.put_tc_token("c@lid", &token(b"t", 10, Some(10))).await.unwrap();
    backend.store_received_tc_token("a@lid", b"old", 50).await.unwrap();
    backend.touch_tc_token_sender_timestamp("a@lid", 70).await.unwrap();
    backend.touch_tc_token_sender_timestamp("d@lid", 60).await.unwrap();
    let a = backend.get_tc_token("a@lid").await.unwrap().unwrap();
    saw("token a", format!("{:?} {} {:?}", a.token, a.token_timestamp, a.sender_timestamp));
    saw("tokens", format!("{:?}", sorted(backend.get_all_tc_token_jids().await.unwrap())));
    saw("tokens expired", backend.delete_expired_tc_tokens(50, 100).await.unwrap().to_string());
    saw("tokens left", format!("{:?}", sorted(backend.get_all_tc_token_jids().await.unwrap())));
    backend.delete_tc_token("a@lid").await.unwrap();
    saw(
        "tokens after delete",
        format!("{:?}", sorted(backend.get_all_tc_token_jids().await.unwrap())),
    );
    backend.store_sent_message(ana, "S1", b"payload").await.unwrap();
    backend.store_sent_message(ana, "S2", b"payload2").await.unwrap();
    saw("taken", format!("{:?}", backend.take_sent_message(ana, "S1").await.unwrap()));
    saw("taken again", format!("{:?}", backend.take_sent_message(ana, "S1").await.unwrap()));
    saw("sent kept", backend.delete_expired_sent_messages(0).await.unwrap().to_string());
    saw("sent expired", backend.delete_expired_sent_messages(i64::MAX).await.unwrap().to_string());
    saw("sent gone", format!("{:?}", backend.take_sent_message(ana, "S2").await.unwrap()));
    backend.store_pending_inbound(ana, ana, "P1", b"m1").await.unwrap();
    backend.store_pending_inbound(ana, ana, "P2", b"m2").await.unwrap();
    saw("pending", format!("{:?}", backend.get_pending_inbound(ana, ana, "P1").await.unwrap()));
    backend.delete_pending_inbound(ana, ana, "P1").await.unwrap();
    saw(
        "pending gone",
        format!("{:?}", backend.get_pending_inbound(ana, ana, "P1").await.unwrap()),
    );
    let rows = [
        PendingInboundRow { chat: ana, sender: ana, id: "P3", message: b"m3" },
        PendingInboundRow { chat: ana, sender: ana, id: "P4", message: b"m4" },
    ];
    backend.store_pending_inbound_batch(&rows).await.unwrap();
    let keys = [PendingInboundKey { chat: ana, sender: ana, id: "P3" }];
    backend.delete_pending_inbound_batch(&keys).await.unwrap();
    saw("pending P4", format!("{:?}", backend.get_pending_inbound(ana, ana, "P4").await.unwrap()));
    saw("pending P3", format!("{:?}", backend.get_pending_inbound(ana, ana, "P3").await.unwrap()));
    saw("pending kept", backend.delete_expired_pending_inbound(0).await.unwrap().to_string());
    saw(
        "pending expired",
        backend.delete_expired_pending_inbound(i64::MAX).await.unwrap().to_string(),
    );

    // Message secrets.
    let secret = |id: &str, expires_at, ts| MsgSecretEntry {
        chat: Arc::from(ana),
        sender: Arc::from(ana),
        msg_id: Arc::from(id),
        secret: [id.len() as u8; 32],
        expires_at,
        message_ts: ts,
    };
    backend
        .put_msg_secrets(vec![secret("M1", 100, 5), secret("M22", 0, 0), secret("M333", 300, 0)])
        .await
        .unwrap();
    backend.put_msg_secrets(vec![secret("M1", 50, 0)]).await.unwrap();
    saw(
        "secret",
        format!(
            "{:?}",
            backend.get_msg_secret_with_ts(ana, ana, "M1").await.unwrap().map(|(s, ts)| (s[0], ts))
        ),
    );
    saw("secrets expired", backend.delete_expired_msg_secrets(200).await.unwrap().to_string());
    saw(
        "secret M1",
        format!("{:?}", backend.get_msg_secret(ana, ana, "M1").await.unwrap().is_some()),
    );
    saw(
        "secret M22",
        format!("{:?}", backend.get_msg_secret(ana, ana, "M22").await.unwrap().is_some()),
    );
    saw(
        "secret M333",
        format!("{:?}", backend.get_msg_secret(ana, ana, "M333").await.unwrap().is_some()),
    );

    // The device.
    saw("device before", format!("{:?}", backend.exists().await.unwrap()));
    backend.create().await.unwrap();
    saw("device created", format!("{:?}", backend.exists().await.unwrap()));
    let mut device = backend.load().await.unwrap().unwrap();
    device.pn = Some("15550000000@s.whatsapp.net".parse().unwrap());
    device.push_name = "Shop".into();
    device.next_pre_key_id = 812;
    backend.save(&device).await.unwrap();
    let loaded = backend.load().await.unwrap().unwrap();
    saw(
        "device",
        format!(
            "{:?} {} {} {}",
            loaded.pn.map(|j| j.to_string()),
            loaded.push_name,
            loaded.next_pre_key_id,
            loaded.registration_id == device.registration_id
        ),
    );
    saw(
        "device keys",
        format!(
            "{}",
            loaded.identity_key.public_key.public_key_bytes()
                == device.identity_key.public_key.public_key_bytes()
        ),
    );
    seen
}

#[tokio::test]
async fn each_store_trait_round_trips_as_whatsapp_rust_s_own_in_memory_backend_does() {
    let store = memory();
    let ours = exercise(&backend(&store)).await;
    let theirs = exercise(&InMemoryBackend::new()).await;
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a, b);
    }
    assert_eq!(ours.len(), theirs.len());
}

#[tokio::test]
async fn a_new_opener_on_the_same_store_reads_everything_back_and_nothing_outside_the_prefix() {
    let store = memory();
    let first = backend(&store);
    first.create().await.unwrap();
    let device = first.load().await.unwrap().unwrap();
    first.put_identity("a@s.whatsapp.net", [1; 32]).await.unwrap();
    first.store_prekeys_batch(&[(41, b("p41"))], false).await.unwrap();
    first.store_signed_prekey(7, b"sp7").await.unwrap();
    first.set_sync_key(b"k", AppStateSyncKey::default()).await.unwrap();
    drop(first);
    let second = backend(&store);
    let again = second.load().await.unwrap().unwrap();
    assert_eq!(again.registration_id, device.registration_id);
    assert_eq!(second.load_identity("a@s.whatsapp.net").await.unwrap(), Some([1; 32]));
    assert_eq!(second.get_max_prekey_id().await.unwrap(), 41);
    assert_eq!(second.load_all_signed_prekeys().await.unwrap(), [(7, b"sp7".to_vec())]);
    assert_eq!(second.get_latest_sync_key_id().await.unwrap(), Some(b"k".to_vec()));
    let other = StoreBackend::new(
        Arc::clone(&store),
        "botmesh:provider:other:session:",
        SessionGuard::new(),
    );
    assert!(!other.exists().await.unwrap(), "another provider's session is its own");
}

#[tokio::test]
async fn once_the_lock_is_lost_writes_are_refused_and_store_failures_are_errors() {
    let faulty = Arc::new(FaultyStore::new(memory()));
    let store: Arc<dyn Store> = Arc::clone(&faulty) as _;
    let guard = SessionGuard::new();
    let backend = StoreBackend::new(Arc::clone(&store), PREFIX, guard.clone());
    backend.put_session("a", b"s").await.unwrap();
    faulty.fail_checkpoint_writes(1);
    assert!(backend.put_session("a", b"s2").await.is_err(), "a store failure is an error");
    assert_eq!(
        backend.get_session("a").await.unwrap(),
        Some(b("s")),
        "the failed write left the row"
    );
    guard.release();
    let refused = backend.put_session("a", b"s3").await.unwrap_err();
    assert!(refused.to_string().contains("database"), "{refused}");
    assert!(backend.store_signed_prekey(1, b"x").await.is_err());
    assert_eq!(backend.get_session("a").await.unwrap(), Some(b("s")), "reads still work");
}

#[tokio::test]
async fn reads_after_the_first_are_local_and_a_message_costs_a_few_writes() {
    let faulty = Arc::new(FaultyStore::new(memory()));
    let store: Arc<dyn Store> = Arc::clone(&faulty) as _;
    let backend = backend(&store);
    let ana = "34600000001@s.whatsapp.net";
    backend.put_session(ana, b"s").await.unwrap();
    let writes = faulty.landed().len();
    for _ in 0..10 {
        backend.get_session(ana).await.unwrap();
    }
    assert_eq!(faulty.landed().len(), writes, "reads write nothing");
    // What whatsapp-rust stores for one message received (buffered until the bot took it,
    // the ratchet moved) and one sent (the ratchet moved, kept for retries, its secret).
    let before = faulty.landed().len();
    backend.store_pending_inbound(ana, ana, "IN1", b"m").await.unwrap();
    backend.put_sessions_batch(&[(Arc::from(ana), b("s'"))]).await.unwrap();
    backend.delete_pending_inbound(ana, ana, "IN1").await.unwrap();
    let received = faulty.landed().len() - before;
    let before = faulty.landed().len();
    backend.put_sessions_batch(&[(Arc::from(ana), b("s''"))]).await.unwrap();
    backend.store_sent_message(ana, "OUT1", b"m").await.unwrap();
    backend
        .put_msg_secrets(vec![MsgSecretEntry::new(
            &ana.parse().unwrap(),
            &ana.parse().unwrap(),
            "OUT1",
            [1; 32],
            0,
            0,
        )])
        .await
        .unwrap();
    let sent = faulty.landed().len() - before;
    assert_eq!((received, sent), (5, 4), "writes per message received and sent");
}

#[tokio::test]
async fn the_cache_does_not_grow_with_messages_and_a_deleted_row_leaves_it() {
    let store = memory();
    let backend = backend(&store);
    let ana = "34600000001@s.whatsapp.net";
    let jid = ana.parse().unwrap();
    backend.put_session(ana, b"s").await.unwrap();
    backend.get_session(ana).await.unwrap();
    let settled = backend.rows.cached_rows();
    for n in 0..50 {
        let msg = format!("M{n}");
        backend.store_pending_inbound(ana, ana, &msg, b"m").await.unwrap();
        assert_eq!(backend.get_pending_inbound(ana, ana, &msg).await.unwrap(), Some(b"m".into()));
        backend.delete_pending_inbound(ana, ana, &msg).await.unwrap();
        backend.store_sent_message(ana, &msg, b"m").await.unwrap();
        backend.take_sent_message(ana, &msg).await.unwrap();
        backend.save_base_key(ana, &msg, b"k").await.unwrap();
        backend.get_msg_secret(ana, ana, &msg).await.unwrap();
        let secret = MsgSecretEntry::new(&jid, &jid, &msg, [1; 32], 0, 0);
        backend.put_msg_secrets(vec![secret]).await.unwrap();
    }
    // The session's row, and the indexes of the swept tables.
    assert!(backend.rows.cached_rows() <= settled + 3, "{}", backend.rows.cached_rows());
    backend.delete_session(ana).await.unwrap();
    assert_eq!(backend.get_session(ana).await.unwrap(), None);
    assert!(backend.rows.cached_rows() < settled + 3, "a deleted row leaves the cache");
    let index = backend.rows.index(super::device::SECRET).await.unwrap();
    assert!(index.is_empty(), "secrets that never expire are never swept: not indexed");
}

#[tokio::test]
async fn an_index_write_that_fails_leaves_no_row_outside_the_index() {
    let store = memory();
    let backend = backend(&store);
    let ana = "34600000001@s.whatsapp.net";
    // The index of pending messages cannot be written (here: it cannot even be read).
    let broken = botmesh_traits::CheckpointWrite::new("not an index".to_owned());
    store.set_checkpoint(&format!("{PREFIX}index:pending"), &broken).await.unwrap();
    assert!(backend.store_pending_inbound(ana, ana, "IN1", b"m").await.is_err());
    let key = format!("{PREFIX}pending:{}", super::rows::id(&[ana, ana, "IN1"]));
    assert!(store.get_checkpoint(&key).await.unwrap().is_none(), "no row outside the index");
    // Written whole, the row is listed.
    backend.store_sent_message(ana, "OUT1", b"m").await.unwrap();
    assert_eq!(backend.rows.index("sent").await.unwrap().len(), 1);
}

#[tokio::test]
async fn whatsapp_rust_s_own_start_keeps_its_device_in_the_store_and_the_next_start_loads_it() {
    use whatsapp_rust::prelude::Bot;

    use crate::error::Error;
    use crate::rust::backend;
    use crate::seam::{Session, WaOpen, WaPairing};

    let store = memory();
    let open =
        || WaOpen::new(Session::Store, WaPairing::Qr, "wa").with_store(Some(Arc::clone(&store)));
    let first =
        Bot::builder().with_backend_arc(backend(&open()).await.unwrap()).build().await.unwrap();
    let device = first.client().persistence_manager().get_device_snapshot();
    drop(first);
    let row = store.get_checkpoint(&format!("{PREFIX}device:self")).await.unwrap();
    assert!(row.is_some(), "the library created its device in the store");
    let second =
        Bot::builder().with_backend_arc(backend(&open()).await.unwrap()).build().await.unwrap();
    let again = second.client().persistence_manager().get_device_snapshot();
    assert_eq!(again.registration_id, device.registration_id, "the same device");
    assert_eq!(
        again.identity_key.public_key.public_key_bytes(),
        device.identity_key.public_key.public_key_bytes()
    );
    assert!(!second.client().is_logged_in(), "not connected: nothing reached WhatsApp");
    let without = WaOpen::new(Session::Store, WaPairing::Qr, "wa");
    assert!(matches!(backend(&without).await, Err(Error::NoStore)), "no store, no session");
}
