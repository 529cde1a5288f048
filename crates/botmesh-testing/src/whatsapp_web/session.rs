//! Sessions on the network: opening (connected, or pairing first), the client a provider sends
//! with, and the delivery of the offline queue to the connected session, one message at a
//! time, each waiting for its acknowledgement.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Bytes, CheckpointWrite, Store, async_trait};
use botmesh_whatsapp_web::seam::{
    Session as Kept, WaAck, WaClient, WaConnector, WaEvent, WaMedia, WaOpen, WaOutgoing, WaPairing,
    WaSession,
};
use botmesh_whatsapp_web::{Error, Result};
use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc};

use super::Net;
use super::state::{Live, SentMessage, Session, lock};

/// The file the network's client keeps its linked device's id in, in the session directory;
/// in the bot's store, the row of this name under the session's prefix.
pub(crate) const DEVICE_FILE: &str = "phone-network-device";

/// Where a session keeps its linked device's id: a directory, or the bot's store.
#[derive(Clone)]
pub(crate) enum Place {
    Dir(std::path::PathBuf),
    Store { store: Arc<dyn Store>, key: String },
}

impl Place {
    fn of(open: &WaOpen) -> Result<Self> {
        match &open.session {
            Kept::Dir(dir) => Ok(Self::Dir(dir.clone())),
            _ => {
                let store = open.store.clone().ok_or(Error::NoStore)?;
                Ok(Self::Store { store, key: format!("{}{DEVICE_FILE}", open.store_prefix()) })
            }
        }
    }

    /// What the network counts openers by: the directory, or the session's prefix.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Dir(dir) => dir.display().to_string(),
            Self::Store { key, .. } => format!("store:{}", key.trim_end_matches(DEVICE_FILE)),
        }
    }

    async fn read_device(&self) -> Option<String> {
        match self {
            Self::Dir(dir) => read_device(dir),
            Self::Store { store, key } => {
                let row = store.get_checkpoint(key).await.ok().flatten();
                row.map(|r| r.data)
            }
        }
    }
}

/// Opens sessions of the bot number on a [`PhoneNetwork`](super::PhoneNetwork): what a
/// `WhatsAppWebProvider` is built with in tests
/// (`WhatsAppWebProvider::with_connector(dir, network.connector())`).
#[derive(Clone)]
pub struct PhoneConnector {
    pub(crate) net: Arc<Net>,
}

impl std::fmt::Debug for PhoneConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhoneConnector").finish_non_exhaustive()
    }
}

fn read_device(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(DEVICE_FILE)).ok().map(|s| s.trim().to_owned())
}

#[async_trait]
impl WaConnector for PhoneConnector {
    async fn open(&self, open: WaOpen) -> Result<WaSession> {
        let (tx, rx) = mpsc::unbounded_channel();
        let place = Place::of(&open)?;
        let device = place.read_device().await;
        let serial = {
            let mut st = lock(&self.net.state);
            let serial = st.next_id();
            st.opened += 1;
            let n = {
                let n = st.openers.entry(place.name()).or_default();
                *n += 1;
                *n
            };
            let max = st.max_openers.entry(place.name()).or_default();
            *max = (*max).max(n);
            st.sessions.insert(serial, Session { place, tx: tx.clone() });
            serial
        };
        let linked = device.as_ref().is_some_and(|d| lock(&self.net.state).linked.contains(d));
        match device {
            Some(device) if linked => connect(&self.net, serial, device),
            Some(_) => {
                let reason = "this device was removed from the phone".to_owned();
                let _ = tx.send(WaEvent::LoggedOut { reason });
            }
            None => {
                let auto = {
                    let mut st = lock(&self.net.state);
                    st.waiting = Some(serial);
                    st.codes_shown += 1;
                    st.auto_link
                };
                let event = match &open.pairing {
                    WaPairing::Code { .. } => {
                        WaEvent::PairCode { code: format!("PAIR-{serial:04}") }
                    }
                    _ => WaEvent::Qr {
                        code: format!("2@phone-network,{serial}"),
                        valid_for: Duration::from_secs(20),
                    },
                };
                let _ = tx.send(event);
                if auto {
                    link(&self.net, serial);
                }
            }
        }
        let client = PhoneClient { net: Arc::clone(&self.net), serial };
        let events =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
            );
        Ok(WaSession::new(Arc::new(client), Box::pin(events.boxed())))
    }
}

/// Links the session `serial` that is showing pairing codes: its device id goes into its
/// directory (or the bot's store) and the phone's list of linked devices, and it connects.
pub(crate) fn link(net: &Arc<Net>, serial: u64) -> bool {
    let device = format!("device-{serial}");
    let (place, tx) = {
        let mut st = lock(&net.state);
        let Some(session) = st.sessions.get(&serial) else { return false };
        let (place, tx) = (session.place.clone(), session.tx.clone());
        st.linked.insert(device.clone());
        if st.waiting == Some(serial) {
            st.waiting = None;
        }
        (place, tx)
    };
    match place {
        Place::Dir(dir) => {
            if std::fs::write(dir.join(DEVICE_FILE), &device).is_err() {
                return false;
            }
            paired(net, serial, device, &tx);
        }
        Place::Store { store, key } => {
            // The store is asynchronous: the device is kept, then the session connects.
            let net = Arc::clone(net);
            tokio::spawn(async move {
                let write = CheckpointWrite::new(device.clone());
                if store.set_checkpoint(&key, &write).await.is_ok() {
                    paired(&net, serial, device, &tx);
                }
            });
        }
    }
    true
}

fn paired(net: &Arc<Net>, serial: u64, device: String, tx: &mpsc::UnboundedSender<WaEvent>) {
    let _ = tx.send(WaEvent::Paired { me: net.jid() });
    connect(net, serial, device);
}

/// Connects session `serial` as linked device `device`; a session connected before with the
/// same number is replaced.
pub(crate) fn connect(net: &Arc<Net>, serial: u64, device: String) {
    let wake = Arc::new(Notify::new());
    {
        let mut st = lock(&net.state);
        let Some(tx) = st.sessions.get(&serial).map(|s| s.tx.clone()) else { return };
        if let Some(old) = st.live.take() {
            let _ = old.tx.send(WaEvent::Replaced);
            old.wake.notify_one();
        }
        let _ = tx.send(WaEvent::Connected);
        st.live = Some(Live { serial, device, tx, wake: Arc::clone(&wake), blocked: false });
    }
    wake.notify_one();
    tokio::spawn(deliver(Arc::clone(net), serial, wake));
}

/// Delivers the offline queue to session `serial` while it is the connected one, a message at
/// a time, each waiting for its acknowledgement; a refused one blocks the queue until the
/// session connects again.
async fn deliver(net: Arc<Net>, serial: u64, wake: Arc<Notify>) {
    loop {
        let next = {
            let mut st = lock(&net.state);
            let Some(live) = st.live.as_ref().filter(|l| l.serial == serial) else { return };
            let (blocked, tx) = (live.blocked, live.tx.clone());
            match st.pending.front().cloned() {
                Some(m) if !blocked => {
                    st.deliveries += 1;
                    Some((m, tx))
                }
                _ => None,
            }
        };
        let Some((message, tx)) = next else {
            wake.notified().await;
            continue;
        };
        let (ack, wait) = WaAck::new();
        let id = message.key.id.clone();
        if tx.send(WaEvent::Messages { messages: vec![message], ack }).is_err() {
            return;
        }
        drop(tx);
        let accepted = wait.accepted().await;
        let mut st = lock(&net.state);
        if accepted {
            if st.pending.front().is_some_and(|m| m.key.id == id) {
                st.pending.pop_front();
            }
            st.acknowledged.push(id);
        } else {
            st.refusals += 1;
            if let Some(live) = st.live.as_mut().filter(|l| l.serial == serial) {
                live.blocked = true;
            }
        }
    }
}

/// The client of one session on the network.
struct PhoneClient {
    net: Arc<Net>,
    serial: u64,
}

#[async_trait]
impl WaClient for PhoneClient {
    async fn send(&self, message: WaOutgoing) -> Result<String> {
        let mut st = lock(&self.net.state);
        if st.live.as_ref().is_none_or(|l| l.serial != self.serial) {
            return Err(Error::NotConnected);
        }
        if let Some(retry_after) = st.throttle.take() {
            return Err(Error::RateLimited { retry_after });
        }
        let id = format!("3EB0{:016X}", st.next_id());
        st.sent.push(SentMessage { id: id.clone(), message });
        Ok(id)
    }

    async fn download(&self, media: &WaMedia) -> Result<Bytes> {
        let st = lock(&self.net.state);
        let found = st.media.get(&media.handle).cloned();
        found.ok_or_else(|| Error::client("download", format!("no media {}", media.handle)))
    }

    async fn close(&self) {
        let mut st = lock(&self.net.state);
        if let Some(session) = st.sessions.remove(&self.serial)
            && let Some(n) = st.openers.get_mut(&session.place.name())
        {
            *n = n.saturating_sub(1);
        }
        if st.live.as_ref().is_some_and(|l| l.serial == self.serial)
            && let Some(live) = st.live.take()
        {
            live.wake.notify_one();
        }
        if st.waiting == Some(self.serial) {
            st.waiting = None;
        }
    }
}
