//! What the stand-in records for tests to read: the bot's sends, and each webhook delivery
//! attempt.

use serde_json::Value;

use super::channel::Channel;

/// A message (or sender action) the bot sent: a `POST /{id}/messages` call that succeeded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SentMessage {
    /// The channel it went through.
    pub channel: Channel,
    /// The user it went to: the `wa_id` (the `to` number in digits only) on WhatsApp,
    /// `recipient.id` on Messenger and Instagram.
    pub to: String,
    /// The id the stand-in answered with (`wamid.…` or `m_…`); `None` for sender actions
    /// such as `typing_on` that get no message id.
    pub message_id: Option<String>,
    /// What was sent. On WhatsApp the `type` (`"text"`, `"image"`, `"interactive"`,
    /// `"template"`, `"reaction"`, ...). On Messenger and Instagram `"text"`, the attachment's
    /// type (`"image"`, `"file"`, `"template"`, ...), or the `sender_action` (`"react"`,
    /// `"typing_on"`, ...).
    pub kind: String,
    /// The text: a text's body, a media caption, an interactive message's `body.text`, or a
    /// Messenger message's `text`.
    pub text: Option<String>,
    /// The message replied to: WhatsApp's `context.message_id`, Messenger's `reply_to.mid`.
    pub reply_to: Option<String>,
    /// The media sent, for a media type or an attachment.
    pub media: Option<SentMedia>,
    /// The reaction, for a WhatsApp `reaction` or a Messenger `react`/`unreact` action.
    pub reaction: Option<SentReaction>,
    /// Messenger's `messaging_type` (`"RESPONSE"`, `"UPDATE"`, `"MESSAGE_TAG"`).
    pub messaging_type: Option<String>,
    /// The whole request body as the bot sent it.
    pub body: Value,
}

/// The media of a [`SentMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentMedia {
    /// The media type: WhatsApp's `type` or the attachment's `type`.
    pub kind: String,
    /// The URL given (`link`, or `payload.url`), for Meta to fetch; the stand-in fetches
    /// nothing.
    pub link: Option<String>,
    /// The media id given (`id`, or `payload.attachment_id`), as uploaded before.
    pub id: Option<String>,
    /// A document's `filename`.
    pub filename: Option<String>,
}

/// The reaction of a [`SentMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentReaction {
    /// The message reacted to.
    pub message_id: String,
    /// The emoji; empty when the reaction is removed.
    pub emoji: String,
}

/// One attempt to deliver a webhook body to a subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The body's number, from 1 in the order bodies were queued; every attempt of one body
    /// has the same.
    pub delivery_id: u64,
    /// The channel the body is for.
    pub channel: Channel,
    /// The subscriber's URL this attempt went to.
    pub url: String,
    /// The HTTP status the subscriber answered, or `None` when it could not be reached.
    pub status: Option<u16>,
    /// Why the attempt failed, when it did: the transport error, or the status.
    pub error: Option<String>,
    /// Which attempt this was for this body, from 1.
    pub attempt: u32,
    /// The ids of the messages the body carries (for a receipt, the message it is about), in
    /// the body's order.
    pub message_ids: Vec<String>,
    /// The raw body, exactly the bytes that were signed.
    pub body: String,
}

impl Delivery {
    /// Whether the subscriber took the body (answered 2xx).
    pub fn delivered(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}
