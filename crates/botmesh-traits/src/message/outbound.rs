//! A message the bot sends.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{ChatId, MediaKind, MessageId};

/// A button the bot offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Button {
    /// The id that comes back in [`Content::Button`](crate::Content::Button).
    pub id: String,
    /// The text shown to the user.
    pub title: String,
}

impl Button {
    /// A button with an id and a title.
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Self {
        Self { id: id.into(), title: title.into() }
    }
}

/// Where the file of an outbound media message comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MediaSource {
    /// A URL the platform fetches, or a platform media id it already holds.
    Url {
        /// The URL or id.
        url: String,
    },
    /// The file itself, uploaded by the provider.
    Bytes {
        /// The file's bytes.
        data: Bytes,
        /// Its file name.
        file_name: Option<String>,
        /// Its MIME type.
        mime: Option<String>,
    },
}

impl MediaSource {
    /// A file the platform fetches from `url`.
    pub fn url(url: impl Into<String>) -> Self {
        Self::Url { url: url.into() }
    }

    /// A file uploaded from memory.
    pub fn bytes(data: impl Into<Bytes>, file_name: Option<String>, mime: Option<String>) -> Self {
        Self::Bytes { data: data.into(), file_name, mime }
    }
}

/// What the bot sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutboundContent {
    /// Plain text.
    Text {
        /// The text.
        body: String,
    },
    /// Text with buttons; providers without buttons render them as a numbered list.
    Buttons {
        /// The text above the buttons.
        body: String,
        /// The buttons.
        buttons: Vec<Button>,
    },
    /// An image, video, document, sticker or audio file.
    Media {
        /// Which kind of media.
        kind: MediaKind,
        /// The file.
        source: MediaSource,
        /// A caption.
        caption: Option<String>,
    },
    /// A location.
    Location {
        /// Latitude in degrees.
        latitude: f64,
        /// Longitude in degrees.
        longitude: f64,
        /// The place's name.
        name: Option<String>,
    },
    /// A message template the platform approved beforehand (WhatsApp), the only kind it takes
    /// outside its customer service window.
    Template {
        /// The template's name.
        name: String,
        /// Its language code (`en_US`).
        language: String,
        /// The values of its body parameters, in order.
        params: Vec<String>,
    },
    /// A reaction to a message of the chat, or its removal (`emoji: None`).
    Reaction {
        /// The message reacted to.
        to: MessageId,
        /// The emoji.
        emoji: Option<String>,
    },
}

impl From<String> for OutboundContent {
    /// A text.
    fn from(body: String) -> Self {
        Self::Text { body }
    }
}

impl From<&str> for OutboundContent {
    /// A text.
    fn from(body: &str) -> Self {
        Self::Text { body: body.to_owned() }
    }
}

/// A message the bot sends to a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Outbound {
    /// The chat to send to.
    pub chat: ChatId,
    /// What to send.
    pub content: OutboundContent,
    /// The provider to send through. Replies carry the provider their chat came from; a bot
    /// with one provider sends through it when this is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The message this one answers, when the platform can show it.
    pub reply_to: Option<MessageId>,
    /// The same for every attempt at this one send, when the bot knows it (with durability,
    /// the send's outbox key). A provider whose platform takes an idempotency key passes it
    /// on, so that a send repeated after a crash is delivered once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl Outbound {
    /// A text message.
    pub fn text(chat: impl Into<ChatId>, body: impl Into<String>) -> Self {
        Self::new(chat, OutboundContent::Text { body: body.into() })
    }

    /// A message with any content.
    pub fn new(chat: impl Into<ChatId>, content: OutboundContent) -> Self {
        Self { chat: chat.into(), content, provider: None, reply_to: None, idempotency_key: None }
    }

    /// Sends it through provider `provider` (see [`Outbound::provider`]).
    #[must_use]
    pub fn via(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }

    /// Marks this message as an answer to `id`.
    #[must_use]
    pub fn reply_to(mut self, id: MessageId) -> Self {
        self.reply_to = Some(id);
        self
    }

    /// Sets the idempotency key (see [`Outbound::idempotency_key`]).
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The text of the message, if it has any.
    pub fn text_body(&self) -> Option<&str> {
        match &self.content {
            OutboundContent::Text { body } | OutboundContent::Buttons { body, .. } => Some(body),
            OutboundContent::Media { caption, .. } => caption.as_deref(),
            OutboundContent::Location { name, .. } => name.as_deref(),
            OutboundContent::Reaction { emoji, .. } => emoji.as_deref(),
            OutboundContent::Template { name, .. } => Some(name),
        }
    }
}
