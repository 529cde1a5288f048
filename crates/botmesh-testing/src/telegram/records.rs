//! What the stand-in records of the bot's calls, for tests to read.

use serde_json::Value;

/// A message the bot sent: a `sendMessage`, `sendPhoto` or `sendDocument` call that succeeded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SentMessage {
    /// The method, spelled as the Bot API documents it (`"sendMessage"`).
    pub method: &'static str,
    /// The chat it went to.
    pub chat_id: i64,
    /// The id the stand-in gave it, unique within the chat.
    pub message_id: i64,
    /// The forum topic (`message_thread_id`) it went to.
    pub thread_id: Option<i64>,
    /// The text of a `sendMessage`, or the caption of a photo or document.
    pub text: Option<String>,
    /// `parse_mode` as given (`"HTML"`, `"MarkdownV2"`, ...).
    pub parse_mode: Option<String>,
    /// The message it replies to, from `reply_parameters.message_id` or the older
    /// `reply_to_message_id`.
    pub reply_to_message_id: Option<i64>,
    /// `reply_markup` as given: an inline keyboard, a reply keyboard, ...
    pub reply_markup: Option<Value>,
    /// The photo or document, for `sendPhoto` and `sendDocument`.
    pub media: Option<SentMedia>,
}

/// The photo or document of a [`SentMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentMedia {
    /// Which kind of media.
    pub kind: MediaKind,
    /// How the bot gave the file.
    pub source: MediaSource,
    /// The `file_id` the stand-in answered with; `getFile` knows it.
    pub file_id: String,
}

/// The kind of a [`SentMedia`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MediaKind {
    /// `sendPhoto`.
    Photo,
    /// `sendDocument`.
    Document,
}

/// How the bot gave a file: uploaded with the call, or referred to by a string.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MediaSource {
    /// Bytes uploaded as `multipart/form-data`.
    Upload {
        /// The part's file name, if it had a non-empty one.
        file_name: Option<String>,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A `file_id` the stand-in had issued before.
    FileId(String),
    /// An HTTP URL for Telegram to fetch (the stand-in fetches nothing).
    Url(String),
}

/// An `answerCallbackQuery` call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallbackAnswer {
    /// The query answered, as [`TelegramServer::press_button`](super::TelegramServer::press_button)
    /// returned it.
    pub callback_query_id: String,
    /// The notification text, if any.
    pub text: Option<String>,
    /// Whether the text is shown as an alert rather than a toast.
    pub show_alert: bool,
    /// The URL to open, if any.
    pub url: Option<String>,
    /// `cache_time` in seconds, if given.
    pub cache_time: Option<i64>,
}

/// One attempt to push an update to the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookDelivery {
    /// The update pushed.
    pub update_id: i64,
    /// The webhook URL it was posted to.
    pub url: String,
    /// The HTTP status the receiver answered, or `None` when it could not be reached.
    pub status: Option<u16>,
    /// Why the attempt failed, when it did: the transport error, or the status.
    pub error: Option<String>,
    /// Which attempt this was for this update, from 1.
    pub attempt: u32,
}

impl WebhookDelivery {
    /// Whether the receiver took the update (answered 2xx).
    pub fn delivered(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// The webhook the bot set with `setWebhook`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Webhook {
    /// Where updates are posted.
    pub url: String,
    /// Sent in `X-Telegram-Bot-Api-Secret-Token` with every push, if set.
    pub secret_token: Option<String>,
    /// `max_connections`, if given (the stand-in pushes one update at a time regardless).
    pub max_connections: Option<i64>,
}
