//! WhatsApp Web for botmesh: one WhatsApp number on a linked-device session, with warm
//! standbys.
//!
//! [`WhatsAppWebProvider`] holds the session the way WhatsApp's own web client does (a
//! device linked to the phone by QR code or pairing code). WhatsApp lets one client hold a
//! session, so the provider is exclusive: with several replicas only the elected one opens
//! the session and the others stand by; when the leader dies, a standby opens it within
//! `lease + lease / 3`. The session's keys live where its [`Session`] says: in a directory every
//! replica reaches (a shared volume; a lock file in it refuses a second opener, as a safety net
//! under the lease), or in the bot's shared store ([`WhatsAppWebProvider::in_store`]; a fenced
//! lock in the store does), so that replicas need no shared volume.
//!
//! ```no_run
//! # #[cfg(feature = "whatsapp-rust")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use botmesh_core::{Bot, BotError};
//! use botmesh_whatsapp_web::WhatsAppWebProvider;
//!
//! let bot = Bot::builder()
//!     .provider(WhatsAppWebProvider::new("/var/lib/bot/whatsapp"))
//!     .on_message(|ctx| async move {
//!         ctx.reply(format!("you said {}", ctx.body())).await?;
//!         Ok::<_, BotError>(())
//!     })
//!     .build()?;
//! bot.start().await?;
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! The provider drives its client through a seam of its own ([`seam`]): a [`WaConnector`]
//! opens a session and returns a [`WaClient`] and the session's [`WaEvent`]s. The mapping,
//! the lock, acknowledgements and the transport's status live in the provider, so tests run
//! them against a stand-in of the phone network (`botmesh-testing`, feature `whatsapp-web`).
//!
//! Inbound messages are acknowledged to WhatsApp only once the bot took them
//! (`Intake::accept`); a message the bot cannot take yet is offered again until it can, the
//! session waiting meanwhile, and one left unacknowledged at stop is delivered again by
//! WhatsApp to the next opener. Logged out, replaced by another client, or reconnecting given
//! up, the transport is closed: a leader whose transport stays closed for the runtime's
//! `provider_down` steps down so a standby connects. A logged-out session is reported with an
//! error event that tells the operator to pair again.
//!
//! # Mapping
//!
//! Chats are JIDs (`<number>@s.whatsapp.net`, `<id>@g.us`); in a group the author is the
//! participant, so each member has a conversation of their own. Text, images, videos,
//! documents, stickers, audio, voice notes, locations, contact cards, button replies,
//! reactions, edits and replies map to botmesh's `Content`; anything else is
//! `Content::Unsupported`. Status updates are [`WhatsAppEvent::Status`] events, never
//! messages. Message ids are `<chat>/<stanza>`, `<chat>/<author>/<stanza>` in groups and
//! `<chat>/me/<stanza>` for the bot's own, so replies and reactions find their message.
//! Outbound, buttons go out as a numbered list and an Opus audio file as a voice note.
//!
//! # Feature flags
//!
//! - `whatsapp-rust` (on by default): the seam's real implementation on whatsapp-rust
//!   (default features off; its WebSocket and HTTP clients use rustls), with the session in
//!   SQLite in the session directory or in the bot's store ([`rust::StoreBackend`]), and
//!   [`WhatsAppWebProvider::new`] and [`WhatsAppWebProvider::in_store`].
//! - `serde`: `WhatsAppWebSettings`, the provider as a configuration file describes it, and
//!   [`Session`] from configuration files, with durations as text (`session_lock_ttl = "15s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "serde")]
mod config;
mod error;
mod events;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = include_str!("../guide.md")]
}

mod ids;
mod inbound;
mod outbound;
mod provider;
mod pump;
#[cfg(feature = "whatsapp-rust")]
pub mod rust;
pub mod seam;
mod session;
mod state;
mod store_lock;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::WhatsAppWebSettings;
pub use error::{Error, Result};
pub use events::{WhatsAppEvent, draw_qr};
pub use provider::WhatsAppWebProvider;
pub use seam::{Session, WaClient, WaConnector, WaEvent};
pub use session::{LOCK_FILE, is_locked};
