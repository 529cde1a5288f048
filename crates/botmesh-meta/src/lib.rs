//! Meta's messaging platforms for botmesh: the WhatsApp Cloud API, Messenger and Instagram
//! messaging.
//!
//! Each channel is a [`MetaProvider`] every replica runs (a shared session): Meta posts each
//! message to your webhook behind your load balancer, and the replica that receives it queues
//! it. The endpoint ([`MetaProvider::router`]):
//!
//! - answers the verification handshake (`hub.verify_token`, compared in constant time);
//! - checks `X-Hub-Signature-256`, the HMAC-SHA256 of the raw body under the app secret
//!   (constant time); a wrong or missing signature is answered `401` and never parsed;
//! - answers `200` only once every message of the body is queued (journaled, with
//!   durability): a crash before the answer makes Meta deliver the body again, and what was
//!   taken already is then dropped as a duplicate. Nothing is lost, nothing handled twice.
//!
//! ```no_run
//! use botmesh_core::{Bot, BotError};
//! use botmesh_meta::{Channel, MetaProvider};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let whatsapp = MetaProvider::new(
//!     Channel::WhatsApp { phone_number_id: "1234567890".into() },
//!     std::env::var("META_TOKEN")?,
//!     std::env::var("META_APP_SECRET")?,
//!     std::env::var("META_VERIFY_TOKEN")?,
//! )?;
//! let bot = Bot::builder()
//!     .provider(whatsapp.clone())
//!     .on_message(|ctx| async move {
//!         ctx.reply(format!("you said {}", ctx.body())).await?;
//!         Ok::<_, BotError>(())
//!     })
//!     .build()?;
//! bot.start().await?;
//! let app = botmesh_traits::webhook::axum::Router::new().merge(whatsapp.router("/meta/whatsapp"));
//! # let _ = app;
//! # Ok(()) }
//! ```
//!
//! # Mapping
//!
//! Text, media (fetched on demand through the Graph API's media endpoint with
//! `Ctx::media`), locations, contacts, interactive button and list replies and Messenger quick
//! replies and postbacks (as `Content::Button`), reactions, and replies (`Inbound::reply_to`);
//! delivery and read receipts are events, and only a `failed` status a failed delivery;
//! WhatsApp calls and their statuses, and anything else a user does, are `Content::Unsupported`
//! with its JSON. The business's own messages echoed back and notices about the account are no
//! messages: they are skipped (see the [guide]'s mapping).
//! Outbound: text, media by link (WhatsApp also by media id), buttons (WhatsApp: up to three
//! as buttons, more as a list; Messenger and Instagram: quick replies), reactions, and on
//! WhatsApp locations and templates (`OutboundContent::Template`), the only messages WhatsApp
//! takes outside its 24-hour window: anything else then fails with `Error::WindowClosed`.
//!
//! One app posts every account's messages of a kind (every page, every number) to one URL:
//! give each account its own provider and endpoint. A message for an account the provider is
//! not is refused with an error event.
//!
//! Graph errors come back typed: `RateLimited` (the bot waits and sends again), `Unauthorized`
//! for an expired token (the transport is reported closed; restart with a new token),
//! `RecipientGone`, `WindowClosed`, `InvalidInput` for a request Meta refuses as it is. Meta's
//! "not processed" answers are retried with backoff; a timeout or an unexplained 5xx is not
//! (the message may have gone out), and is left to the bot, whose outbox keeps a rerun of the
//! step from sending twice.
//!
//! # Feature flags
//!
//! - `serde`: `MetaSettings`, the provider as a configuration file describes it, and
//!   [`Channel`] from configuration files, with durations as text (`request_timeout = "10s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod channel;
#[cfg(feature = "serde")]
mod config;
mod graph;
mod inbound;
mod provider;
mod signature;
mod webhook;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = include_str!("../guide.md")]
}

pub use channel::Channel;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::MetaSettings;
pub use provider::MetaProvider;
pub use signature::SIGNATURE_HEADER;
