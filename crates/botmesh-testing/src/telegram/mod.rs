//! A local Telegram Bot API stand-in (feature `telegram`): an HTTP server on `127.0.0.1:0`
//! that speaks the [Bot API](https://core.telegram.org/bots/api) wire protocol, so that a real
//! client (teloxide, or any other) runs against it in tests.
//!
//! Use it to test your own Telegram bot, whatever framework it is written with: point the
//! bot's client at [`TelegramServer::api_url`] (teloxide:
//! `Bot::new(token).set_api_url(url)`), then act as its users ([`TelegramServer::user_says`],
//! [`TelegramServer::press_button`], any update with [`TelegramServer::user_sends`]) and read
//! what it did ([`TelegramServer::sent`], [`TelegramServer::callback_answers`],
//! [`TelegramServer::webhook_deliveries`]).
//!
//! # What it implements
//!
//! - Calls to `{api_url}/bot{token}/{method}`, the method matched in any case (teloxide sends
//!   `GetUpdates`), with parameters as JSON, a urlencoded form, the query string, or
//!   `multipart/form-data` with uploads. Answers are `{"ok": true, "result": ...}` or
//!   `{"ok": false, "error_code": N, "description": "..."}`; malformed requests get `400`,
//!   unknown methods `404 Not Found`, a bad or revoked token `401 Unauthorized`.
//! - `getMe`; `getUpdates` with `offset` (updates below it are confirmed and forgotten),
//!   `limit` and long-poll `timeout`; `sendMessage`, `sendPhoto`, `sendDocument` (by upload,
//!   `file_id` or URL), recorded as [`SentMessage`]s; `answerCallbackQuery`, recorded as
//!   [`CallbackAnswer`]s; `setWebhook`, `deleteWebhook`, `getWebhookInfo`; `getFile`, and
//!   downloads from `{api_url}/file/bot{token}/{file_path}`. Other parameters (such as
//!   `allowed_updates` or `entities`) are accepted and ignored.
//! - One poller at a time: a `getUpdates` that arrives while another is in flight is answered
//!   `409 Conflict: terminated by other getUpdates request; ...` and counted
//!   ([`TelegramServer::conflicts`], [`TelegramServer::max_pollers`]); while a webhook is set,
//!   `getUpdates` is answered `409` too.
//! - Webhook pushes: with a webhook set, each update is posted to it as JSON with the
//!   [`SECRET_TOKEN_HEADER`], in order and one at a time; a non-2xx answer or a failed
//!   connection is retried after a delay that doubles (100 ms to 2 s by default, see
//!   [`TelegramServerBuilder::webhook_retry`]). Every attempt is a [`WebhookDelivery`].
//! - Faults: [`TelegramServer::fail_next`] answers a method's next call with a [`Fault`]
//!   (`429` with `retry_after`, `401`, a 5xx, any error), and
//!   [`TelegramServer::revoke_token`] makes every call `401`.
//!
//! Chats are typed by their id as on Telegram ([`fixtures::chat_type`]): positive ids are
//! private chats, `-100…` ids supergroups, other negative ids groups.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use botmesh_testing::telegram::TelegramServer;
//! use teloxide::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = TelegramServer::start().await?;
//! let bot = Bot::new("123:abc").set_api_url(server.api_url().parse()?);
//!
//! server.user_says(42, 42, "hello");
//! // The bot under test: an echo, one round by hand.
//! for update in bot.get_updates().timeout(1).await? {
//!     if let teloxide::types::UpdateKind::Message(m) = update.kind {
//!         bot.send_message(m.chat.id, m.text().unwrap_or_default().to_uppercase()).await?;
//!     }
//! }
//! server.wait_for_sent(42, 1, Duration::from_secs(5)).await;
//! assert_eq!(server.sent_texts(42), ["HELLO"]);
//! # Ok(()) }
//! ```

mod faults;
pub mod fixtures;
mod methods;
mod params;
mod polling;
mod records;
mod routing;
mod server;
mod state;
mod webhook;

#[cfg(test)]
mod tests;

pub use faults::Fault;
pub use records::{
    CallbackAnswer, MediaKind, MediaSource, SentMedia, SentMessage, Webhook, WebhookDelivery,
};
pub use server::{TelegramServer, TelegramServerBuilder};
pub use webhook::SECRET_TOKEN_HEADER;
