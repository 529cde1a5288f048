//! What an inbound message carries.

use serde::{Deserialize, Serialize};

use super::MessageId;

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

/// A file a user sent, as the platform describes it. Its bytes are fetched through the
/// provider that received it ([`Provider::fetch_media`](crate::Provider::fetch_media)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Media {
    /// Where the provider serves it, or the platform's id for it.
    pub url: String,
    /// Its MIME type, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Its file name, when the platform gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Its size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl Media {
    /// A file at `url` (or with platform id `url`).
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), mime: None, file_name: None, size: None }
    }

    /// Sets the MIME type.
    #[must_use]
    pub fn with_mime(mut self, mime: impl Into<String>) -> Self {
        self.mime = Some(mime.into());
        self
    }

    /// Sets the file name.
    #[must_use]
    pub fn with_file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name = Some(name.into());
        self
    }

    /// Sets the size in bytes.
    #[must_use]
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }
}

/// A contact card a user shared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Contact {
    /// The name shown on the card.
    pub name: String,
    /// Its phone numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phones: Vec<String>,
    /// Its e-mail addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emails: Vec<String>,
    /// The contact's id on the platform, when they use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

impl Contact {
    /// A card with a name and nothing else.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), phones: Vec::new(), emails: Vec::new(), user_id: None }
    }

    /// Adds a phone number.
    #[must_use]
    pub fn with_phone(mut self, phone: impl Into<String>) -> Self {
        self.phones.push(phone.into());
        self
    }

    /// Adds an e-mail address.
    #[must_use]
    pub fn with_email(mut self, email: impl Into<String>) -> Self {
        self.emails.push(email.into());
        self
    }

    /// Sets the platform user id.
    #[must_use]
    pub fn with_user_id(mut self, id: impl Into<String>) -> Self {
        self.user_id = Some(id.into());
        self
    }
}

/// What a message carries.
///
/// Nothing a user sends is dropped: content a provider cannot map arrives as
/// [`Content::Unsupported`] with the platform's raw payload.
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
        /// The file.
        media: Media,
        /// The caption the user typed with it.
        caption: Option<String>,
    },
    /// A voice note.
    Voice {
        /// The recording.
        media: Media,
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
    /// One or more contact cards.
    Contacts {
        /// The cards.
        contacts: Vec<Contact>,
    },
    /// A press of a button or a list row the bot sent (a Telegram callback query, a WhatsApp
    /// interactive reply). A flow waiting for an answer gets it like any message; its text is
    /// the button's title.
    Button {
        /// The id the bot gave the button.
        id: String,
        /// The text shown on the button.
        title: String,
    },
    /// A reaction to a message, or its removal.
    Reaction {
        /// The message reacted to.
        to: MessageId,
        /// The emoji, or `None` when the user took their reaction back.
        emoji: Option<String>,
    },
    /// A message the user edited after sending it.
    Edit {
        /// The message as first sent.
        of: MessageId,
        /// What it carries now.
        content: Box<Content>,
    },
    /// Content the provider does not map (a poll, a game, a new platform feature), kept whole.
    Unsupported {
        /// The platform's name for it (`poll`, `story_mention`).
        kind: String,
        /// The platform's payload, as it arrived (JSON for most platforms).
        raw: String,
    },
}

impl Content {
    /// A text.
    pub fn text(body: impl Into<String>) -> Self {
        Self::Text { body: body.into() }
    }

    /// The content type as a short word: `text`, `media`, `voice`, `location`, `contacts`,
    /// `button`, `reaction`, `edit` or `unsupported`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Media { .. } => "media",
            Self::Voice { .. } => "voice",
            Self::Location { .. } => "location",
            Self::Contacts { .. } => "contacts",
            Self::Button { .. } => "button",
            Self::Reaction { .. } => "reaction",
            Self::Edit { .. } => "edit",
            Self::Unsupported { .. } => "unsupported",
        }
    }

    /// The text of the message: the body, a media caption, a button's title, a place's name,
    /// a reaction's emoji, or the edited text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { body } => Some(body),
            Self::Media { caption, .. } => caption.as_deref(),
            Self::Button { title, .. } => Some(title),
            Self::Location { name, .. } => name.as_deref(),
            Self::Reaction { emoji, .. } => emoji.as_deref(),
            Self::Edit { content, .. } => content.as_text(),
            Self::Voice { .. } | Self::Contacts { .. } | Self::Unsupported { .. } => None,
        }
    }

    /// The file it carries, for media and voice notes.
    pub fn media(&self) -> Option<&Media> {
        match self {
            Self::Media { media, .. } | Self::Voice { media, .. } => Some(media),
            Self::Edit { content, .. } => content.media(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_content_round_trips_through_json() {
        let all = [
            Content::text("hi"),
            Content::Media {
                kind: MediaKind::Image,
                media: Media::new("f1").with_mime("image/png").with_size(3),
                caption: Some("cat".into()),
            },
            Content::Voice { media: Media::new("v1"), seconds: Some(4) },
            Content::Location { latitude: 1.5, longitude: -2.0, name: None },
            Content::Contacts { contacts: vec![Contact::new("Ana").with_phone("+34")] },
            Content::Button { id: "yes".into(), title: "Yes".into() },
            Content::Reaction { to: MessageId::new("m1"), emoji: Some("👍".into()) },
            Content::Edit { of: MessageId::new("m1"), content: Box::new(Content::text("hey")) },
            Content::Unsupported { kind: "poll".into(), raw: r#"{"poll":{}}"#.into() },
        ];
        for content in all {
            let json = serde_json::to_string(&content).unwrap();
            let back: Content = serde_json::from_str(&json).unwrap();
            assert_eq!(back, content, "{json}");
            assert!(json.contains(&format!(r#""type":"{}""#, content.type_name())), "{json}");
        }
    }

    #[test]
    fn the_text_of_an_edit_is_its_new_text_and_a_button_press_reads_as_its_title() {
        let edit = Content::Edit { of: MessageId::new("m"), content: Box::new(Content::text("b")) };
        assert_eq!(edit.as_text(), Some("b"));
        let press = Content::Button { id: "y".into(), title: "Yes".into() };
        assert_eq!(press.as_text(), Some("Yes"));
        assert_eq!(Content::Unsupported { kind: "poll".into(), raw: "{}".into() }.as_text(), None);
    }
}
