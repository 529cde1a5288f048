//! What the stand-in records of a bot's calls, and the faults it can be told to inject.

use std::time::Duration;

/// A button the bot sent in an action row.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentButton {
    /// Its `custom_id`, what comes back when it is pressed.
    pub custom_id: String,
    /// Its label.
    pub label: String,
}

/// A file the bot uploaded with a message (`multipart/form-data`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentFile {
    /// The file name the upload gave.
    pub file_name: String,
    /// The bytes.
    pub data: Vec<u8>,
}

/// A message the bot created with `POST /channels/{id}/messages`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SentMessage {
    /// The message id the stand-in gave it.
    pub id: u64,
    /// The channel it went to.
    pub channel: u64,
    /// Its `content`.
    pub content: String,
    /// The message it replies to (`message_reference.message_id`).
    pub reply_to: Option<u64>,
    /// Its buttons, in order, over all action rows.
    pub buttons: Vec<SentButton>,
    /// The image URLs of its embeds.
    pub embed_images: Vec<String>,
    /// The files uploaded with it.
    pub files: Vec<SentFile>,
    /// The request's JSON payload as it arrived.
    pub payload: serde_json::Value,
}

/// A reaction the bot added or removed with `PUT`/`DELETE
/// /channels/{c}/messages/{m}/reactions/{emoji}/@me`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentReaction {
    /// The channel.
    pub channel: u64,
    /// The message reacted to.
    pub message: u64,
    /// The emoji, decoded from the path.
    pub emoji: String,
    /// `true` for an added reaction, `false` for a removed one.
    pub added: bool,
}

/// An interaction callback the bot posted to `POST /interactions/{id}/{token}/callback`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InteractionCallback {
    /// The interaction's id.
    pub interaction: u64,
    /// The interaction token in the path.
    pub token: String,
    /// The callback `type` (4 a message, 5 deferred, 6 deferred update, ...).
    pub kind: u64,
    /// The callback's `data`, if any.
    pub data: serde_json::Value,
    /// How long after the interaction was dispatched the callback arrived.
    pub after: Duration,
}

/// A failure the stand-in answers a bot's next call of one kind with (see
/// [`DiscordServer::fail_next_send`](super::DiscordServer::fail_next_send)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// `429 Too Many Requests` with `retry_after` in the JSON body; with `header`, also in a
    /// `Retry-After` header (as Discord sends it), which an HTTP client's ratelimiter may act
    /// on by itself.
    RateLimited {
        /// How long to wait.
        retry_after: Duration,
        /// Whether the `Retry-After` header is sent too.
        header: bool,
    },
    /// Any status with a Discord JSON error code (`50007` cannot send to this user, `10003`
    /// unknown channel, `40005` request entity too large...).
    Status {
        /// The HTTP status.
        status: u16,
        /// Discord's error code.
        code: u64,
        /// Its message.
        message: String,
    },
}
