//! The client seam: the small interface the provider drives a WhatsApp Web client through.
//!
//! [`WaConnector::open`] opens one linked-device session and returns a [`WaClient`] to send
//! with and the stream of what the session reports ([`WaEvent`]). The provider owns the
//! mapping to botmesh's model, the session's lock and its lifecycle; a connector only speaks
//! to WhatsApp. The `whatsapp-rust` feature brings the real connector; `botmesh-testing`'s
//! `whatsapp-web` feature a stand-in that tests drive as the phone network.
//!
//! `model.rs` holds the messages that cross the seam, `place.rs` where the session lives.

mod model;
mod place;

use std::fmt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Bytes, Store, async_trait};
use futures_util::Stream;
use tokio::sync::oneshot;

pub use model::{
    WaBody, WaContact, WaFile, WaIncoming, WaKey, WaMedia, WaMediaKind, WaOutgoing, WaOutgoingBody,
    WaReceipt, WaReceiptKind,
};
pub use place::{Session, SessionGuard};

use crate::Result;

/// How a session that is not linked yet is paired with the phone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaPairing {
    /// The session shows QR codes ([`WaEvent::Qr`]) for the phone to scan.
    Qr,
    /// The session asks for a pairing code for this phone number (digits with the country
    /// code, no `+`), to type on the phone ([`WaEvent::PairCode`]).
    Code {
        /// The bot's phone number.
        phone: String,
    },
}

/// What a connector needs to open a session.
#[derive(Clone)]
#[non_exhaustive]
pub struct WaOpen {
    /// Where the session's keys live: a directory, or the bot's store.
    pub session: Session,
    /// How to pair, when the session is not linked yet.
    pub pairing: WaPairing,
    /// The bot's shared store, lent by the bot ([`Intake::store`](botmesh_traits::Intake::store)),
    /// where a session kept in the store lives; `None` outside a bot.
    pub store: Option<Arc<dyn Store>>,
    /// The provider's id, to name the session's rows in the store.
    pub provider: String,
    /// Held while this opener holds the session: a connector keeping the session in the store
    /// writes nothing once it is released.
    pub guard: SessionGuard,
}

impl fmt::Debug for WaOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaOpen")
            .field("session", &self.session)
            .field("pairing", &self.pairing)
            .field("store", &self.store.is_some())
            .field("provider", &self.provider)
            .field("held", &self.guard.is_held())
            .finish()
    }
}

impl WaOpen {
    /// A session kept as `session` says, paired by `pairing`, for provider `provider`.
    pub fn new(
        session: impl Into<Session>,
        pairing: WaPairing,
        provider: impl Into<String>,
    ) -> Self {
        Self {
            session: session.into(),
            pairing,
            store: None,
            provider: provider.into(),
            guard: SessionGuard::new(),
        }
    }

    /// Lends the bot's store.
    #[must_use]
    pub fn with_store(mut self, store: Option<Arc<dyn Store>>) -> Self {
        self.store = store;
        self
    }

    /// The guard that tells whether this opener still holds the session.
    #[must_use]
    pub fn with_guard(mut self, guard: SessionGuard) -> Self {
        self.guard = guard;
        self
    }

    /// The session directory, when the session is kept in one.
    pub fn dir(&self) -> Option<&Path> {
        self.session.dir()
    }

    /// The key prefix under which the session's rows live in the bot's store.
    pub fn store_prefix(&self) -> String {
        store_prefix(&self.provider)
    }
}

/// The key prefix under which the session of provider `provider` lives in the bot's store:
/// `botmesh:provider:<provider>:session:`.
pub fn store_prefix(provider: &str) -> String {
    format!("botmesh:provider:{provider}:session:")
}

/// The stream of what an open session reports, in order. It ends when the session is closed
/// or gone for good.
pub type WaEvents = Pin<Box<dyn Stream<Item = WaEvent> + Send + 'static>>;

/// An open session: the client and its events.
#[non_exhaustive]
pub struct WaSession {
    /// What the provider sends with.
    pub client: Arc<dyn WaClient>,
    /// What the session reports.
    pub events: WaEvents,
}

impl fmt::Debug for WaSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaSession").finish_non_exhaustive()
    }
}

impl WaSession {
    /// A session from its client and its event stream.
    pub fn new(client: Arc<dyn WaClient>, events: WaEvents) -> Self {
        Self { client, events }
    }
}

/// Opens WhatsApp Web sessions.
#[async_trait]
pub trait WaConnector: Send + Sync + 'static {
    /// Opens the session `open` describes and starts connecting it. Pairing, connecting and
    /// reconnecting are reported on the session's events.
    async fn open(&self, open: WaOpen) -> Result<WaSession>;
}

/// An open session's client.
#[async_trait]
pub trait WaClient: Send + Sync + 'static {
    /// Sends a message and returns its stanza id.
    async fn send(&self, message: WaOutgoing) -> Result<String>;

    /// The bytes of a file a user sent.
    async fn download(&self, media: &WaMedia) -> Result<Bytes>;

    /// Disconnects and closes the session; its events end.
    async fn close(&self);
}

/// What an open session reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum WaEvent {
    /// Connected (again): messages flow.
    Connected,
    /// A QR code to show, for the phone to scan (WhatsApp > Linked devices). Codes rotate
    /// until one is scanned.
    Qr {
        /// The QR payload.
        code: String,
        /// How long this code stays valid.
        valid_for: Duration,
    },
    /// A pairing code to type on the phone.
    PairCode {
        /// The code.
        code: String,
    },
    /// The phone linked this session.
    Paired {
        /// The bot's own JID.
        me: String,
    },
    /// Messages from users, in order. The session acknowledges them to WhatsApp only once
    /// [`WaAck::accept`] is called; refused (or dropped), WhatsApp delivers them again when
    /// the session next connects.
    Messages {
        /// The messages.
        messages: Vec<WaIncoming>,
        /// The answer the session waits for.
        ack: WaAck,
    },
    /// A delivery or read receipt for messages the bot sent.
    Receipt(WaReceipt),
    /// WhatsApp logged the linked device out (removed on the phone, or banned): the session
    /// is over and must be paired again.
    LoggedOut {
        /// Why, as WhatsApp said.
        reason: String,
    },
    /// Another client opened the same session and WhatsApp closed this one's stream.
    Replaced,
    /// The connection dropped. `reconnecting` tells whether the client tries again; `false`
    /// means it gave up.
    Disconnected {
        /// Whether the client reconnects by itself.
        reconnecting: bool,
    },
}

/// The answer a session waits for before it acknowledges a batch of messages to WhatsApp.
///
/// Dropping it unanswered refuses the batch.
#[derive(Debug)]
pub struct WaAck(oneshot::Sender<bool>);

/// The waiting side of a [`WaAck`], held by the session.
#[derive(Debug)]
pub struct WaAckWait(oneshot::Receiver<bool>);

impl WaAck {
    /// A new answer and what waits for it.
    pub fn new() -> (Self, WaAckWait) {
        let (tx, rx) = oneshot::channel();
        (Self(tx), WaAckWait(rx))
    }

    /// The bot took every message of the batch: acknowledge them.
    pub fn accept(self) {
        let _ = self.0.send(true);
    }

    /// The bot could not take them: leave them for WhatsApp to deliver again.
    pub fn refuse(self) {
        let _ = self.0.send(false);
    }
}

impl WaAckWait {
    /// Whether the batch was accepted; `false` when refused or dropped.
    pub async fn accepted(self) -> bool {
        self.0.await.unwrap_or(false)
    }
}
