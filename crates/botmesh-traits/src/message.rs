//! The message model every provider converts to and from.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps an identifier.
            pub fn new(id: impl AsRef<str>) -> Self {
                Self(Arc::from(id.as_ref()))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }
    };
}

string_id!(
    /// A chat as the provider names it: a phone number, a Telegram chat id, a channel id.
    ChatId
);
string_id!(
    /// The provider's own id for a message, used to drop duplicates.
    MessageId
);
string_id!(
    /// The ordering key of a conversation.
    ///
    /// Messages with one key are handled one at a time, in order; messages with different keys
    /// run in parallel. The key is the chat, and in a group it is the chat plus the
    /// participant, so that each member of a group has a conversation of their own. Built by
    /// [`Inbound::key`].
    ChatKey
);

/// The kind of a media attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MediaKind {
    /// A picture.
    Image,
    /// A video.
    Video,
    /// A file.
    Document,
    /// A sticker.
    Sticker,
    /// An audio file that is not a voice note.
    Audio,
}

/// What a message carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        body: String,
    },
    /// An image, video, document, sticker or audio file.
    Media {
        /// Which kind of media.
        kind: MediaKind,
        /// Where the provider serves it, or its provider media id.
        url: String,
        /// Its MIME type, when known.
        mime: Option<String>,
        /// The caption the user typed with it.
        caption: Option<String>,
    },
    /// A voice note.
    Voice {
        /// Where the provider serves it, or its provider media id.
        url: String,
        /// Its MIME type, when known.
        mime: Option<String>,
        /// Its length in seconds, when known.
        seconds: Option<u32>,
    },
    /// A shared location.
    Location {
        /// Latitude in degrees.
        latitude: f64,
        /// Longitude in degrees.
        longitude: f64,
        /// The place's name, when the user picked one.
        name: Option<String>,
    },
    /// A tap on a button or a list row the bot sent.
    Reply {
        /// The id the bot gave the button.
        id: String,
        /// The text shown on the button.
        title: String,
    },
}

impl Content {
    /// The content type as a short word: `text`, `media`, `voice`, `location` or `reply`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Media { .. } => "media",
            Self::Voice { .. } => "voice",
            Self::Location { .. } => "location",
            Self::Reply { .. } => "reply",
        }
    }

    /// The text of the message: the body, a media caption, or a button's title.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::Text { body } => Some(body),
            Self::Media { caption, .. } => caption.as_deref(),
            Self::Reply { title, .. } => Some(title),
            Self::Location { name, .. } => name.as_deref(),
            Self::Voice { .. } => None,
        }
    }
}

/// A message a user sent to the bot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Inbound {
    /// The provider's id for this message.
    pub id: MessageId,
    /// The chat it was sent in.
    pub chat: ChatId,
    /// In a group, the member who sent it.
    pub participant: Option<String>,
    /// The sender's display name, when the platform gives one.
    pub sender_name: Option<String>,
    /// What it carries.
    pub content: Content,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The sender's language (a BCP 47 tag such as `es`), when the platform gives one.
    pub lang: Option<String>,
    /// The id of the provider that received it.
    pub provider: String,
}

impl Inbound {
    /// A text message from a one-to-one chat.
    pub fn text(
        provider: impl Into<String>,
        id: impl Into<MessageId>,
        chat: impl Into<ChatId>,
        body: impl Into<String>,
    ) -> Self {
        Self::new(provider, id, chat, Content::Text { body: body.into() })
    }

    /// A message with any content from a one-to-one chat.
    pub fn new(
        provider: impl Into<String>,
        id: impl Into<MessageId>,
        chat: impl Into<ChatId>,
        content: Content,
    ) -> Self {
        Self {
            id: id.into(),
            chat: chat.into(),
            participant: None,
            sender_name: None,
            content,
            timestamp_ms: 0,
            lang: None,
            provider: provider.into(),
        }
    }

    /// Marks the message as sent by `participant` in a group chat.
    pub fn in_group(mut self, participant: impl Into<String>) -> Self {
        self.participant = Some(participant.into());
        self
    }

    /// Sets the send time, in milliseconds since the Unix epoch.
    pub fn at(mut self, timestamp_ms: u64) -> Self {
        self.timestamp_ms = timestamp_ms;
        self
    }

    /// Sets the sender's language.
    pub fn with_lang(mut self, lang: impl Into<String>) -> Self {
        self.lang = Some(lang.into());
        self
    }

    /// The ordering key: the chat, or the chat and the participant in a group.
    pub fn key(&self) -> ChatKey {
        match &self.participant {
            None => ChatKey::new(self.chat.as_str()),
            Some(p) => ChatKey::from(format!("{}/{}", self.chat, p)),
        }
    }
}

/// A button the bot offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Button {
    /// The id that comes back in [`Content::Reply`].
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
        /// Where the platform can fetch it.
        url: String,
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
}

/// A message the bot sends to a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Outbound {
    /// The chat to send to.
    pub chat: ChatId,
    /// What to send.
    pub content: OutboundContent,
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
        Self { chat: chat.into(), content, reply_to: None, idempotency_key: None }
    }

    /// Marks this message as an answer to `id`.
    pub fn reply_to(mut self, id: MessageId) -> Self {
        self.reply_to = Some(id);
        self
    }

    /// Sets the idempotency key (see [`Outbound::idempotency_key`]).
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_of_a_group_message_is_per_participant() {
        let a = Inbound::text("t", "1", "group", "hi").in_group("ana");
        let b = Inbound::text("t", "2", "group", "hi").in_group("bob");
        assert_ne!(a.key(), b.key());
        assert_eq!(Inbound::text("t", "3", "chat", "x").key().as_str(), "chat");
    }
}
