//! Telegram for botmesh.
//!
//! [`TelegramProvider`] talks to the Bot API through teloxide's client (`teloxide-core`); the
//! dispatching is botmesh's own. Pick a mode:
//!
//! - **Long polling** ([`TelegramProvider::polling`]): nothing to expose to the internet.
//!   Telegram allows one poller per token (a second gets `409 Conflict`), so the session is
//!   exclusive: with several replicas, the elected one polls and the others stand by; a
//!   standby takes over within `lease + lease / 3` of the poller dying and resumes at the
//!   offset kept in the bot's store.
//! - **Webhooks** ([`TelegramProvider::webhook`]): Telegram posts every update to your HTTPS
//!   endpoint, served by every replica behind a load balancer. The secret token header is
//!   checked in constant time (a wrong one is answered `401`), and an update is answered
//!   `200` only once the bot took it (journaled, with durability), so Telegram retries what a
//!   crash interrupted.
//!
//! ```no_run
//! use botmesh_core::{Bot, BotError};
//! use botmesh_telegram::TelegramProvider;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let token = std::env::var("TELEGRAM_TOKEN")?;
//! let bot = Bot::builder()
//!     .provider(TelegramProvider::polling(token))
//!     .on_message(|ctx| async move {
//!         ctx.reply(format!("you said {}", ctx.body())).await?;
//!         Ok::<_, BotError>(())
//!     })
//!     .build()?;
//! bot.start().await?;
//! # Ok(()) }
//! ```
//!
//! # Mapping
//!
//! Text (with `/command@yourbot` read as `/command`), photos, voice notes, documents, videos,
//! audio, stickers, locations and contacts map to botmesh's `Content`; a press of an inline
//! keyboard button is a `Content::Button` (its callback query answered once the bot took it);
//! an edited message is a `Content::Edit`; anything else is `Content::Unsupported` with the
//! update's JSON. In groups and supergroups the sender is the participant, so each member has a
//! conversation of their own; a forum topic is kept in the chat id (`<chat>#<topic>`), so
//! replies go back to the topic. Message ids are `<chat>:<message>`.
//!
//! Outbound, text goes out with the provider's parse mode, buttons as an inline keyboard,
//! media by URL, by Telegram file id or as uploaded bytes, and reactions as message
//! reactions. A `429` comes back as `RateLimited` with Telegram's `retry_after` (the bot waits
//! and sends again); 5xx answers and network failures are retried with backoff; a revoked
//! token is `Unauthorized`, a user who blocked the bot `RecipientGone`.
//!
//! # Testing
//!
//! `botmesh-testing`'s `telegram` feature has a Bot API stand-in to point
//! [`TelegramProvider::with_api_url`] at, so that tests run this crate's real client code.
//!
//! # Feature flags
//!
//! - `serde`: `TelegramSettings`, the provider as a configuration file describes it, with
//!   durations as text (`poll_timeout = "10s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "serde")]
mod config;
mod errors;
mod inbound;
mod offset;
mod outbound;
mod pauses;
mod polling;
mod provider;
mod state;
mod webhook;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = "[example]: https://github.com/botmesh/botmesh/tree/main/examples/telegram"]
    #![doc = include_str!("../guide.md")]
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::{TelegramSettings, TelegramWebhook};
pub use provider::TelegramProvider;
pub use teloxide_core::types::ParseMode;
pub use webhook::SECRET_HEADER;
