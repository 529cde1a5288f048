//! A stand-in for WhatsApp behind `botmesh-whatsapp-web`'s client seam (feature
//! `whatsapp-web`): a phone network with one bot number that tests drive.
//!
//! Build the provider on it with `WhatsAppWebProvider::with_connector(dir,
//! network.connector())`, then act as the users ([`PhoneNetwork::user_says`],
//! [`PhoneNetwork::group_says`], any message with [`PhoneNetwork::user_sends`]) and read what
//! the bot sent ([`PhoneNetwork::sent`], [`PhoneNetwork::sent_texts`]).
//!
//! # What it models
//!
//! - Linked devices: a session directory without a device shows a QR code (or a pairing
//!   code) until the phone links it ([`PhoneNetwork::link_waiting`], or at once by default,
//!   see [`PhoneNetwork::link_by_hand`]); the device's id is then kept in the directory, so a
//!   later session opened on it connects without pairing. A session kept in the bot's store
//!   (`Session::Store`) keeps the device's id there instead, under the session's prefix, so
//!   a replica that shares the store connects without pairing too. A device the phone removed
//!   ([`PhoneNetwork::log_out`]) is logged out when it connects.
//! - One connected session per number: a session that connects replaces the one connected
//!   before, which is told so ([`PhoneNetwork::replace`] does it from outside). The network
//!   counts sessions opened and concurrent openers per session directory
//!   ([`PhoneNetwork::sessions_opened`], [`PhoneNetwork::max_openers`]) or per session kept
//!   in a store ([`PhoneNetwork::max_store_openers`]).
//! - The offline queue: users' messages wait until a session is connected and are delivered
//!   one at a time, each acknowledged only when the session accepts it. A refused message
//!   stays queued and is delivered again when a session next connects
//!   ([`PhoneNetwork::reconnect`] drops and restores the connection).
//! - Faults: [`PhoneNetwork::throttle_next_send`], [`PhoneNetwork::give_up`] (the client
//!   stops reconnecting).

mod session;
mod state;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_traits::Bytes;
use botmesh_whatsapp_web::seam::{
    WaBody, WaEvent, WaIncoming, WaMedia, WaOutgoing, WaReceipt, WaReceiptKind, store_prefix,
};
use tokio::time::Instant;

pub use session::PhoneConnector;
pub use state::SentMessage;

use state::{State, lock};

/// The network's shared state.
pub(crate) struct Net {
    number: String,
    pub(crate) state: Mutex<State>,
}

impl Net {
    pub(crate) fn jid(&self) -> String {
        format!("{}@s.whatsapp.net", self.number)
    }
}

/// A phone network with one bot number, standing in for WhatsApp in tests. Clones share it.
#[derive(Clone)]
pub struct PhoneNetwork {
    net: Arc<Net>,
}

impl std::fmt::Debug for PhoneNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhoneNetwork").field("number", &self.net.number).finish_non_exhaustive()
    }
}

impl Default for PhoneNetwork {
    fn default() -> Self {
        Self::new()
    }
}

/// The JID of phone number `phone`.
pub fn jid(phone: &str) -> String {
    format!("{}@s.whatsapp.net", phone.trim_start_matches('+'))
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl PhoneNetwork {
    /// A network whose bot number is `15550000000`, where the phone links every session that
    /// shows a pairing code at once.
    pub fn new() -> Self {
        let state = State { auto_link: true, ..State::default() };
        Self { net: Arc::new(Net { number: "15550000000".to_owned(), state: Mutex::new(state) }) }
    }

    /// Sessions showing a pairing code wait until [`link_waiting`](Self::link_waiting).
    #[must_use]
    pub fn link_by_hand(self) -> Self {
        lock(&self.net.state).auto_link = false;
        self
    }

    /// What a provider opens sessions with.
    pub fn connector(&self) -> PhoneConnector {
        PhoneConnector { net: Arc::clone(&self.net) }
    }

    /// The bot number's JID.
    pub fn bot_jid(&self) -> String {
        self.net.jid()
    }

    /// The phone links the session showing a pairing code. `false` when none is.
    pub fn link_waiting(&self) -> bool {
        let waiting = lock(&self.net.state).waiting;
        waiting.is_some_and(|serial| session::link(&self.net, serial))
    }

    /// How many QR or pairing codes sessions showed.
    pub fn codes_shown(&self) -> usize {
        lock(&self.net.state).codes_shown
    }

    /// Queues a message to the bot number and delivers it when a session is connected.
    /// Returns its stanza id.
    pub fn user_sends(&self, message: WaIncoming) -> String {
        let id = message.key.id.clone();
        let mut st = lock(&self.net.state);
        st.pending.push_back(message);
        if let Some(live) = &st.live {
            live.wake.notify_one();
        }
        id
    }

    /// A new stanza id, as a phone makes them.
    pub fn stanza_id(&self) -> String {
        format!("3A{:018X}", lock(&self.net.state).next_id())
    }

    /// User `phone` writes `text` to the bot. Returns the stanza id.
    pub fn user_says(&self, phone: &str, text: &str) -> String {
        self.user_sends_body(phone, WaBody::Text(text.to_owned()))
    }

    /// User `phone` sends `body` to the bot. Returns the stanza id.
    pub fn user_sends_body(&self, phone: &str, body: WaBody) -> String {
        let chat = jid(phone);
        let message = WaIncoming::new(chat.clone(), self.stanza_id(), chat, body).at(now_ms());
        self.user_sends(message)
    }

    /// Member `phone` writes `text` in group `group` (its id, without `@g.us`). Returns the
    /// stanza id.
    pub fn group_says(&self, group: &str, phone: &str, text: &str) -> String {
        let chat = format!("{group}@g.us");
        let body = WaBody::Text(text.to_owned());
        self.user_sends(WaIncoming::new(chat, self.stanza_id(), jid(phone), body).at(now_ms()))
    }

    /// Puts a file on the network's media servers and returns how a message refers to it.
    pub fn upload(&self, data: impl Into<Bytes>, mime: &str) -> WaMedia {
        let data = data.into();
        let mut st = lock(&self.net.state);
        let handle = format!("media-{}", st.next_id());
        let size = u64::try_from(data.len()).unwrap_or(u64::MAX);
        st.media.insert(handle.clone(), data);
        WaMedia::new(handle).with_mime(mime).with_size(size)
    }

    /// The user's phone reports that the bot's messages `ids` in `chat` got `kind`.
    pub fn receipt(&self, chat: &str, ids: Vec<String>, kind: WaReceiptKind) {
        let st = lock(&self.net.state);
        if let Some(live) = &st.live {
            let _ = live.tx.send(WaEvent::Receipt(WaReceipt::new(chat, ids, kind)));
        }
    }

    /// What the bot sent to `chat` (a JID), in order, from every session.
    pub fn sent(&self, chat: &str) -> Vec<SentMessage> {
        let st = lock(&self.net.state);
        st.sent.iter().filter(|s| s.message.chat == chat).cloned().collect()
    }

    /// The texts (bodies and captions) the bot sent to `chat`, in order.
    pub fn sent_texts(&self, chat: &str) -> Vec<String> {
        self.sent(chat).iter().filter_map(|s| s.message.text().map(str::to_owned)).collect()
    }

    /// Everything the bot sent, in order.
    pub fn all_sent(&self) -> Vec<WaOutgoing> {
        lock(&self.net.state).sent.iter().map(|s| s.message.clone()).collect()
    }

    /// Waits until the bot sent at least `n` messages to `chat`, and returns them; panics
    /// after `within`.
    pub async fn wait_for_sent(&self, chat: &str, n: usize, within: Duration) -> Vec<SentMessage> {
        let deadline = Instant::now() + within;
        loop {
            let sent = self.sent(chat);
            if sent.len() >= n {
                return sent;
            }
            assert!(Instant::now() < deadline, "{chat} got {} messages, wanted {n}", sent.len());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The next send of any session is refused as rate limited, asking to wait `retry_after`.
    pub fn throttle_next_send(&self, retry_after: Duration) {
        lock(&self.net.state).throttle = Some(retry_after);
    }

    /// The phone removes the connected session's device: the session is logged out, and a
    /// session opened on its directory later is logged out at once.
    pub fn log_out(&self) {
        let mut st = lock(&self.net.state);
        if let Some(live) = st.live.take() {
            st.linked.remove(&live.device);
            let reason = "the device was removed from the phone".to_owned();
            let _ = live.tx.send(WaEvent::LoggedOut { reason });
            live.wake.notify_one();
        }
    }

    /// Another client opens the connected session's device elsewhere: the session is told it
    /// was replaced, and nobody of the test's is connected any more.
    pub fn replace(&self) {
        let mut st = lock(&self.net.state);
        if let Some(live) = st.live.take() {
            let _ = live.tx.send(WaEvent::Replaced);
            live.wake.notify_one();
        }
    }

    /// The connected session's connection drops and its client gives up reconnecting.
    pub fn give_up(&self) {
        let mut st = lock(&self.net.state);
        if let Some(live) = st.live.take() {
            let _ = live.tx.send(WaEvent::Disconnected { reconnecting: false });
            live.wake.notify_one();
        }
    }

    /// The connected session's connection drops and comes back: what it refused is
    /// delivered again.
    pub fn reconnect(&self) {
        let mut st = lock(&self.net.state);
        if let Some(live) = st.live.as_mut() {
            let _ = live.tx.send(WaEvent::Disconnected { reconnecting: true });
            let _ = live.tx.send(WaEvent::Connected);
            live.blocked = false;
            live.wake.notify_one();
        }
    }

    /// How many sessions were opened, ever.
    pub fn sessions_opened(&self) -> usize {
        lock(&self.net.state).opened
    }

    /// How many sessions are open on directory `dir` now.
    pub fn openers(&self, dir: &Path) -> usize {
        let name = dir.display().to_string();
        lock(&self.net.state).openers.get(&name).copied().unwrap_or(0)
    }

    /// The most sessions ever open at once on directory `dir`.
    pub fn max_openers(&self, dir: &Path) -> usize {
        let name = dir.display().to_string();
        lock(&self.net.state).max_openers.get(&name).copied().unwrap_or(0)
    }

    /// How many sessions kept in the bot's store by provider `provider` are open now.
    pub fn store_openers(&self, provider: &str) -> usize {
        let name = format!("store:{}", store_prefix(provider));
        lock(&self.net.state).openers.get(&name).copied().unwrap_or(0)
    }

    /// The most sessions kept in the bot's store by provider `provider` ever open at once.
    pub fn max_store_openers(&self, provider: &str) -> usize {
        let name = format!("store:{}", store_prefix(provider));
        lock(&self.net.state).max_openers.get(&name).copied().unwrap_or(0)
    }

    /// Whether a session is connected now.
    pub fn connected(&self) -> bool {
        lock(&self.net.state).live.is_some()
    }

    /// How many users' messages wait for a session to acknowledge them.
    pub fn pending(&self) -> usize {
        lock(&self.net.state).pending.len()
    }

    /// The stanza ids sessions acknowledged, in order.
    pub fn acknowledged(&self) -> Vec<String> {
        lock(&self.net.state).acknowledged.clone()
    }

    /// How many times a message was delivered to a session (redeliveries included).
    pub fn deliveries(&self) -> usize {
        lock(&self.net.state).deliveries
    }

    /// How many deliveries a session refused.
    pub fn refusals(&self) -> usize {
        lock(&self.net.state).refusals
    }
}
