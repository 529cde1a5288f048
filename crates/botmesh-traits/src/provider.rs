//! The transport side: how a bot receives and sends messages.

use std::pin::Pin;

use async_trait::async_trait;
use futures_core::Stream;

use bytes::Bytes;

use crate::{ChatId, Error, Inbound, Intake, Media, MessageId, Outbound, Result};

/// What a provider's transport can and cannot share.
///
/// Built with [`Capabilities::exclusive`] or [`Capabilities::shared`]; the struct is
/// `#[non_exhaustive]`, so later capabilities arrive without breaking providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Only one process may hold the transport at a time (a WhatsApp Web session, Telegram
    /// long polling, a Discord gateway, an IMAP session). With several replicas, only the
    /// elected one starts it.
    pub exclusive_session: bool,
    /// The provider can send buttons natively.
    pub buttons: bool,
    /// The platform delivers each message once: a message the bot refuses through the
    /// [`Intake`] is never delivered again (a Discord gateway's events). The bot then takes
    /// what the provider hands in even while it stops, as long as it can still answer it here,
    /// and once it cannot (its transport stopped or moved to another replica) it journals the
    /// message, with durability, for the replica that handles the chat next. `false` for a
    /// platform that delivers a refused message again: a webhook's retry, a poller that did not
    /// confirm it, an IMAP mail left unseen.
    pub delivers_once: bool,
}

impl Capabilities {
    /// A transport only one process may hold at a time.
    pub const fn exclusive() -> Self {
        Self { exclusive_session: true, buttons: false, delivers_once: false }
    }

    /// A transport every replica may run at once (webhooks).
    pub const fn shared() -> Self {
        Self { exclusive_session: false, buttons: false, delivers_once: false }
    }

    /// Declares native button support.
    pub const fn with_buttons(mut self, buttons: bool) -> Self {
        self.buttons = buttons;
        self
    }

    /// Declares that the platform never delivers a refused message again (see
    /// [`Capabilities::delivers_once`]).
    pub const fn with_delivers_once(mut self, once: bool) -> Self {
        self.delivers_once = once;
        self
    }
}

/// Whether a provider's transport is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportStatus {
    /// Connected: messages flow both ways.
    Open,
    /// Not connected: not started yet, logged out, or reconnecting.
    Closed,
}

/// How far a sent message got, as the platform reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// The platform took it.
    Sent,
    /// It reached the user's device.
    Delivered,
    /// The user read it.
    Read,
    /// The platform gave up delivering it.
    Failed,
}

/// A delivery or read receipt for a message the bot sent. Receipts are events, never messages:
/// they do not wake a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The chat the message went to.
    pub chat: ChatId,
    /// The platform's id for the message (as in its [`SendReceipt`]).
    pub message: MessageId,
    /// How far it got.
    pub status: DeliveryStatus,
    /// When, in milliseconds since the Unix epoch (0 when the platform does not say).
    pub timestamp_ms: u64,
}

impl Delivery {
    /// A receipt for `message` in `chat`.
    pub fn new(
        chat: impl Into<ChatId>,
        message: impl Into<MessageId>,
        status: DeliveryStatus,
    ) -> Self {
        Self { chat: chat.into(), message: message.into(), status, timestamp_ms: 0 }
    }
}

/// Something a running provider reports.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "messages are nearly every event; boxing them would allocate once per message"
)]
pub enum ProviderEvent {
    /// A user sent a message.
    Message(Inbound),
    /// The transport opened or closed.
    Status(TransportStatus),
    /// A sent message was delivered, read, or failed.
    Delivery(Delivery),
    /// The provider refused something its platform sent (a body that does not parse, an
    /// update it cannot read). The bot reports it as an error event; nothing reached a chat.
    Rejected {
        /// What was wrong with it, never including secrets.
        reason: String,
    },
    /// The transport failed and recovers by itself, connecting or asking again after a pause:
    /// a command the platform refused, a connection lost or frozen. The bot reports it as an
    /// error event (an [`Error::Provider`], to be retried), so that operators see it; no
    /// message was lost.
    Failed {
        /// What the transport was doing, as [`Error::provider`] names it ("search the
        /// mailbox").
        op: &'static str,
        /// What went wrong, never including secrets.
        reason: String,
    },
}

/// The stream of events a started provider yields. It ends when the provider stops.
pub type InboundStream = Pin<Box<dyn Stream<Item = ProviderEvent> + Send + 'static>>;

/// What a provider returns for a sent message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendReceipt {
    /// The platform's id for the sent message, when it gives one.
    pub id: Option<MessageId>,
}

impl SendReceipt {
    /// A receipt carrying the platform's id.
    pub fn new(id: Option<MessageId>) -> Self {
        Self { id }
    }
}

/// A transport between a bot and its users.
///
/// A provider owns its connection (a websocket, a long-polling loop, a webhook endpoint).
/// [`start`](Provider::start) opens it and hands back the stream of what arrives;
/// [`send`](Provider::send) may be called from many tasks at once.
///
/// Messages reach the bot one of two ways:
/// - on the inbound stream, when the platform needs no answer (a polling loop acknowledges by
///   asking for the next batch, a gateway by nothing at all);
/// - through the [`Intake`] given to `start`, when the platform waits for one (a webhook):
///   [`Intake::accept`] returns once the message is safe, and its
///   [`Verdict`](crate::Verdict) says what to answer.
///
/// Errors a platform returns are typed: [`Error::RateLimited`] (the bot waits and sends
/// again), [`Error::Unauthorized`] (a revoked token: report [`TransportStatus::Closed`] too,
/// so that a leader steps down), [`Error::RecipientGone`], [`Error::TooLarge`].
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// A stable id, unique within one bot (`telegram`, `whatsapp-web:shop`). With several
    /// replicas, the exclusive session is elected under `provider:<id>`.
    fn id(&self) -> &str;

    /// What the transport can share. Required: every provider states whether its session is
    /// exclusive.
    fn capabilities(&self) -> Capabilities;

    /// Connects the transport and returns the stream of inbound events. `intake` takes
    /// messages whose platform waits for an acknowledgement (see [`Intake`]); a provider that
    /// yields everything on its stream may drop it.
    async fn start(&self, intake: Intake) -> Result<InboundStream>;

    /// Disconnects. The inbound stream ends after this returns.
    async fn stop(&self) -> Result<()>;

    /// Sends a message.
    async fn send(&self, message: &Outbound) -> Result<SendReceipt>;

    /// Whether the transport is connected right now.
    fn status(&self) -> TransportStatus;

    /// The bytes of a file a user sent (see [`Media`]). Fails with [`Error::Unsupported`]
    /// unless the provider can fetch them.
    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let _ = media;
        Err(Error::Unsupported { op: "fetch_media" })
    }
}
