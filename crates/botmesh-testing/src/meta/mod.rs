//! A local stand-in for Meta's Graph API (feature `meta`): the WhatsApp Cloud API, Messenger
//! and Instagram messaging, served over HTTP on `127.0.0.1:0`, so that a bot's real HTTP
//! client (reqwest, or any other) runs against it in tests, and Meta's webhook calls, signed
//! and retried, go to the bot's replicas.
//!
//! Use it to test your own Meta bot, whatever it is written with: point its Graph API base URL
//! at [`GraphServer::api_url`], [`subscribe`](GraphServer::subscribe) its webhook URL (one per
//! replica), then act as its users ([`GraphServer::whatsapp_text`],
//! [`GraphServer::messenger_text`], any [`Inbound`] with [`GraphServer::deliver`]) and read
//! what it did ([`GraphServer::sent`], [`GraphServer::sent_texts`],
//! [`GraphServer::deliveries`]).
//!
//! # What it implements
//!
//! - Calls under `{api_url}` with any version segment (`/v21.0/...`) or none, authenticated
//!   with `Authorization: Bearer <token>` (or `?access_token=`). Any non-empty token is
//!   accepted unless [`GraphServerBuilder::access_token`] names one; a wrong one gets `401`
//!   with code `190`, an [expired](GraphServer::expire_token) one `401` with code `190` and
//!   subcode `463`. Errors are Graph's envelope: `{"error": {"message", "type", "code",
//!   "error_subcode"?, "error_data"?, "fbtrace_id"}}`.
//! - WhatsApp sends, `POST /{phone_number_id}/messages` with `"messaging_product":
//!   "whatsapp"`, `to` and a `type` of `text`, `image`, `document`, `audio`, `video`,
//!   `sticker`, `location`, `contacts`, `interactive`, `template` or `reaction`, answered
//!   `{"messaging_product": "whatsapp", "contacts": [{"input", "wa_id"}], "messages":
//!   [{"id": "wamid.…"}]}`. The 24-hour customer service window is kept: a message other
//!   than a `template` to a user who has not written in 24 hours (or was put
//!   [outside the window](GraphServer::outside_window)) gets `400` with code `131047`. The
//!   same endpoint takes read receipts (`"status": "read"`, see
//!   [`GraphServer::marked_read`]).
//! - Messenger and Instagram sends, `POST /{page_id}/messages`, `POST /{ig_user_id}/messages`
//!   or `POST /me/messages`, with `recipient.id` and a `message` (`text`, an `attachment`,
//!   `quick_replies`) or a `sender_action` (`typing_on`, `typing_off`, `mark_seen`, `react`
//!   with `payload.message_id` and `payload.reaction`, `unreact`), answered
//!   `{"recipient_id", "message_id": "m_…"}` (typing and `mark_seen` get no `message_id`).
//!   Messenger's own window is not enforced; inject [`Fault::OutsideWindow`] to test it.
//! - Media: [`GraphServer::register_media`] stores bytes; `GET /{media_id}` answers `{"url",
//!   "mime_type", "sha256" (lowercase hex), "file_size", "id", "messaging_product"}`, and the
//!   `url` (`{base_url}/media-download/{media_id}`) serves the bytes to a call with the token.
//!   A bot may upload too: `POST /{phone_number_id}/media` (multipart `file`, `type`,
//!   `messaging_product`) answers `{"id"}`. `GET /{id}` of the phone number, page, Instagram
//!   account or WhatsApp Business Account describes it, for a bot that checks its token on
//!   start.
//! - Faults: [`GraphServer::fail_next`] answers a channel's next send with a [`Fault`]: rate
//!   limits (`429`, or `400` with code `4`, `80007` or `130429`), an expired token (`401`,
//!   `190`), a recipient gone (`131026` on WhatsApp, `551` on Messenger and Instagram), outside
//!   the window, server errors (`500` with code `1` or `2`), or any error.
//! - Webhooks: every [`Inbound`] item is rendered in its channel's shape (below), queued and
//!   posted to the [subscribers](GraphServer::subscribe) with `Content-Type:
//!   application/json` and `X-Hub-Signature-256: sha256=<lowercase hex HMAC-SHA256 of the
//!   raw body, keyed with the app secret>` ([`signature()`]). A non-2xx answer or a failed
//!   connection is retried after a delay that doubles (50 ms to 1 s by default, see
//!   [`GraphServerBuilder::webhook_retry`]), each retry going to the next subscriber. Every
//!   attempt is a [`Delivery`].
//! - Per-user order: a user's next body is not posted until their previous one got a 2xx,
//!   while different users' bodies go concurrently. The ordering key is `(channel, user id)`.
//!   Meta does not promise this; the stand-in keeps it so that tests see a deterministic
//!   order per chat.
//! - Batches: [`GraphServer::deliver_batch`] puts several items, of one user or several, in
//!   one body, to check that a bot acknowledges a body only once all of it is safe.
//! - The handshake: [`GraphServer::verify`] sends `GET
//!   url?hub.mode=subscribe&hub.verify_token=<token>&hub.challenge=<digits>` and says
//!   whether the answer echoed the challenge with `200`; [`GraphServer::post_raw`] posts any
//!   bytes with any signature, for forged or malformed bodies.
//!
//! # Webhook bodies
//!
//! WhatsApp: one entry, one change per item.
//!
//! ```json
//! {"object": "whatsapp_business_account", "entry": [{"id": "<waba id>", "changes": [
//!   {"field": "messages", "value": {
//!     "messaging_product": "whatsapp",
//!     "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
//!     "contacts": [{"profile": {"name": "User 34600111222"}, "wa_id": "34600111222"}],
//!     "messages": [{"from": "34600111222", "id": "wamid.…", "timestamp": "1700000000",
//!                   "type": "text", "text": {"body": "hello"},
//!                   "context": {"from": "15550783881", "id": "wamid.…"}}]}},
//!   {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {},
//!     "statuses": [{"id": "wamid.…", "status": "read", "timestamp": "1700000000",
//!                   "recipient_id": "34600111222"}]}}]}]}
//! ```
//!
//! Other WhatsApp message types: `image`/`audio`/`video`/`document`/`sticker` `{"id",
//! "mime_type", "sha256", "caption"?, "filename"? (documents), "voice"? (voice notes)}`,
//! `location {"latitude", "longitude"}`, `interactive {"type": "button_reply",
//! "button_reply": {"id", "title"}}` or `{"type": "list_reply", "list_reply": {"id",
//! "title", "description"}}`, `button {"payload", "text"}`, `reaction {"message_id",
//! "emoji"}`; a failed status has `errors: [{"code", "title", "message", "error_data":
//! {"details"}}]`.
//!
//! Messenger (`"object": "page"`) and Instagram (`"object": "instagram"`): one entry per
//! item, each with one `messaging` item.
//!
//! ```json
//! {"object": "page", "entry": [{"id": "<page id>", "time": 1700000000000, "messaging": [
//!   {"sender": {"id": "<psid>"}, "recipient": {"id": "<page id>"}, "timestamp": 1700000000000,
//!    "message": {"mid": "m_…", "text": "hello", "reply_to": {"mid": "m_…"}}}]}]}
//! ```
//!
//! Other items carry `message {"mid", "text", "quick_reply": {"payload"}}`, `message
//! {"mid", "attachments": [{"type": "image", "payload": {"url"}}]}` (the URL is public),
//! `postback {"mid", "title", "payload"}`, `reaction {"mid", "action": "react", "emoji",
//! "reaction"}` (or `"action": "unreact"`), `delivery {"mids", "watermark"}` or `read
//! {"watermark"}`.
//!
//! # Example
//!
//! ```
//! use botmesh_testing::meta::{Channel, GraphServer};
//! use serde_json::{Value, json};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = GraphServer::start().await?;
//! // A user writes (queued for the webhook, which the bot would subscribe); it opens the
//! // 24-hour window.
//! let hello = server.whatsapp_text("34600111222", "hello");
//!
//! // The bot under test answers through the Cloud API.
//! let answer: Value = reqwest::Client::new()
//!     .post(format!("{}/{}/messages", server.api_url(), server.phone_number_id()))
//!     .bearer_auth("any-token")
//!     .json(&json!({
//!         "messaging_product": "whatsapp",
//!         "to": "34600111222",
//!         "type": "text",
//!         "text": { "body": "HELLO" },
//!         "context": { "message_id": hello },
//!     }))
//!     .send()
//!     .await?
//!     .json()
//!     .await?;
//! assert!(answer["messages"][0]["id"].as_str().is_some_and(|id| id.starts_with("wamid.")));
//! assert_eq!(server.sent_texts(Channel::WhatsApp, "34600111222"), ["HELLO"]);
//! # Ok(()) }
//! ```

mod bodies;
mod channel;
mod faults;
mod ids;
mod inbound;
mod media;
mod messaging;
mod records;
mod routing;
mod server;
mod signature;
mod state;
mod users;
mod webhook;
mod whatsapp;

#[cfg(test)]
mod tests;

pub use channel::Channel;
pub use faults::Fault;
pub use inbound::{Inbound, MessageStatus};
pub use records::{Delivery, SentMedia, SentMessage, SentReaction};
pub use server::{GraphServer, GraphServerBuilder};
pub use signature::{SIGNATURE_HEADER, signature};
