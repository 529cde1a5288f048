//! E-mail for botmesh.
//!
//! [`EmailProvider`] reads mail over IMAP (`async-imap` on `tokio-rustls`) or takes it from an
//! inbound-mail webhook, parses it with `mail-parser`, and answers over SMTP (`lettre`, rustls
//! only). Pick a mode:
//!
//! - **IMAP** ([`EmailProvider::imap`]): one session reads the mailbox, waiting in IDLE (or
//!   polling a server without it) and reconnecting with backoff. Two sessions would hand every
//!   mail over twice, so the session is exclusive: with several replicas, the elected one
//!   reads and the others stand by; a standby takes over within `lease + lease / 3` of the
//!   reader dying and resumes after the last mail the old one acknowledged, by UIDVALIDITY and
//!   UID kept in the bot's store. A mail is flagged `\Seen` only once the bot took it.
//! - **Ingest** ([`EmailProvider::ingest`]): a mail service posts each raw RFC 822 mail to
//!   [`EmailProvider::router`], served by every replica. The secret (or an HMAC signature of
//!   the body) is checked in constant time, and a mail is answered `200` only once the bot
//!   took it (journaled, with durability).
//!
//! ```no_run
//! use botmesh_core::{Bot, BotError};
//! use botmesh_email::{EmailProvider, ImapConfig, SmtpConfig};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let password = std::env::var("MAIL_PASSWORD")?;
//! let imap = ImapConfig::new("imap.example.org", "help@example.org", &password);
//! let smtp = SmtpConfig::new("smtp.example.org", "help@example.org")
//!     .credentials("help@example.org", &password);
//! let bot = Bot::builder()
//!     .provider(EmailProvider::imap(imap, smtp))
//!     .on_message(|ctx| async move {
//!         ctx.reply(format!("you wrote: {}", ctx.body())).await?;
//!         Ok::<_, BotError>(())
//!     })
//!     .build()?;
//! bot.start().await?;
//! # Ok(()) }
//! ```
//!
//! # Mapping
//!
//! A chat is a correspondent (the sender's address), or a thread
//! ([`Threading::Thread`]: the address and the thread's first `Message-ID`). The message id is
//! a digest of the sender's address and the mail's `Message-ID`
//! ([`EmailProvider::message_id`]), so a mail delivered twice is handled once, and a stranger
//! reusing someone's `Message-ID` is not taken for them. The text a flow sees is
//! the new part of the mail: the quoted mail it answers and the signature are stripped. A mail
//! with attachments is a `Content::Media` captioned with that text; the whole mail, its HTML,
//! its whole text and each attachment are fetched with `fetch_media`
//! ([`EmailProvider::whole_mail`], [`EmailProvider::html`], the media's own URL).
//!
//! Replies are threaded under the mail they answer (`In-Reply-To`, `References`,
//! `Re: subject`). Each mail sent has a `Message-ID`, returned as the send's receipt id and
//! derived from the bot's outbox key when it has one. SMTP errors are typed: a temporary
//! refusal is `RateLimited` (the bot sends again later), an unknown mailbox `RecipientGone`.
//!
//! A malformed mail (no header, no sender, a multipart body without a boundary) is reported as a `Rejected` event and never reaches
//! the bot; over IMAP it stays unseen in the mailbox (or moves to
//! [`ImapConfig::quarantine`]) for a person, and the session goes on past it.
//!
//! # Testing
//!
//! `botmesh-testing`'s `email` feature runs a private Dovecot and an SMTP sink, so that tests
//! run this crate's real IMAP and SMTP clients.
//!
//! # Feature flags
//!
//! - `serde`: `EmailSettings`, the provider as a configuration file describes it, and
//!   [`ImapConfig`], [`SmtpConfig`] and their enums from configuration files, with durations
//!   as text (`idle_timeout = "10m"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod archive;
mod config;
mod imap;
mod ingest;
mod media;
mod parse;
mod progress;
mod provider;
#[cfg(feature = "serde")]
mod settings;
mod smtp;
mod state;
mod text;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = "[example]: https://github.com/botmesh/botmesh/tree/main/examples/email"]
    #![doc = include_str!("../guide.md")]
}

pub use config::{Backlog, ImapConfig, Security, SmtpConfig, Threading};
pub use ingest::{SECRET_HEADER, SIGNATURE_HEADER, signature};
pub use provider::EmailProvider;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::{EmailIngest, EmailSettings};
