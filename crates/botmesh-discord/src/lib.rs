//! Discord for botmesh.
//!
//! [`DiscordProvider`] talks to Discord through serenity's gateway and HTTP client (rustls
//! only); the dispatching is botmesh's own. A bot token has one gateway session per shard, and
//! every session connected with it receives every event, so the session is exclusive: with
//! several replicas the elected one connects and the others stand by. A standby identifies
//! within `lease + lease / 3` of the leader dying, and a leader whose gateway stays closed for
//! `provider_down` steps down so that a standby can connect. A stop or a step-down closes the
//! websocket cleanly before it returns, so two replicas never hold a session at once.
//!
//! ```no_run
//! use botmesh_core::{Bot, BotError};
//! use botmesh_discord::DiscordProvider;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let token = std::env::var("DISCORD_TOKEN")?;
//! let bot = Bot::builder()
//!     .provider(DiscordProvider::new(token, DiscordProvider::default_intents()))
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
//! The chat is the channel id, where replies go. In a guild channel the author is the
//! participant, so each member has a conversation of their own; a DM is a one-to-one chat; a
//! thread is a channel of its own. Text (with a leading mention of the bot taken off; other
//! mentions stay as `<@id>`), attachments (one message each; images, videos, audio and
//! documents by MIME type, voice messages as `Content::Voice`), stickers, replies
//! (`reply_to`), edits (`Content::Edit`), reactions (`Content::Reaction`, `None` when taken
//! back), button presses (`Content::Button`, with the button's label as the title) and slash
//! commands (a text `/name arg ...`) reach the bot; the bot's own messages and reactions do
//! not. Message ids are Discord's; attachments are fetched by
//! [`fetch_media`](botmesh_traits::Provider::fetch_media) from their URL.
//!
//! A button press is acknowledged at once (a deferred update, type 6) and a slash command
//! with a message only its user sees, well within Discord's 3 s, before the bot handles it.
//!
//! Outbound, text goes out as the message content, buttons as action rows (five per row, up
//! to 25), replies as message references, media by URL (images as embeds) or uploaded from
//! bytes, a location as a map link, and reactions as the bot's reactions. A send's
//! idempotency key becomes an enforced nonce, so a send repeated after a crash is created
//! once, provided it is repeated within a few minutes: Discord checks a nonce only against the
//! bot's messages of the past few minutes, and creates the message again past that.
//!
//! # Transport status
//!
//! The transport opens at `READY` and `RESUMED` and closes when the session ends: an invalid
//! session that cannot be resumed, heartbeats Discord stopped acknowledging, a lost
//! connection. After a session on which Discord acknowledged no heartbeat, the next one opens
//! the transport only at its first acknowledged heartbeat (one heartbeat interval after its
//! `IDENTIFY`), so a gateway that lets every session go stale keeps the transport closed and
//! the leader steps down. The provider connects again by itself after a pause that doubles up
//! to 30 s and is never under a random 1 to 5 s (what Discord asks for before identifying
//! again after an invalid session); a refused token (close code `4004`) or refused intents end
//! that, and the transport stays closed. Each start of a session honours the session start
//! limit `/gateway/bot` reports. A `401` on any API call (a send, an interaction's answer)
//! closes the transport too, until the provider starts again.
//!
//! Messages read from the gateway wait in order for the bot to take them, offered again while
//! it cannot (its journal is down): up to [`DiscordProvider::with_queue_limit`] events, past
//! which a new one is dropped and reported. A stop hands what waits over for up to the close
//! timeout once the session is closed, and reports what is left as dropped.
//!
//! # Rate limits and errors
//!
//! serenity's ratelimiter keeps to Discord's per-route buckets and the global limit, and waits
//! out a `429` that says how long. A `429` that reaches the provider (through a proxy, see
//! [`DiscordProvider::with_proxy`]) is `RateLimited` with its wait; a refused token is
//! `Unauthorized` (and closes the transport); an unknown channel or a user who does not take
//! DMs `RecipientGone`; an upload too large `TooLarge`; other refusals `InvalidInput` (not
//! retried).
//!
//! # Testing
//!
//! `botmesh-testing`'s `discord` feature has a Discord stand-in (the API and a websocket
//! gateway) to point [`DiscordProvider::with_proxy`] at, so that tests run serenity's real
//! client code.
//!
//! # Feature flags
//!
//! - `serde`: `DiscordSettings`, the provider as a configuration file describes it, with
//!   durations as text (`close_timeout = "1s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "serde")]
mod config;
mod errors;
mod gateway;
mod handing;
mod inbound;
mod interaction;
mod outbound;
mod provider;
mod session;
mod state;

pub mod guide {
    // These link definitions come first, so they win over the guide's own (written for readers
    // of the file on GitHub).
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = "[example]: https://github.com/botmesh/botmesh/tree/main/examples/discord"]
    #![doc = include_str!("../guide.md")]
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::DiscordSettings;
pub use provider::DiscordProvider;
pub use serenity::model::gateway::GatewayIntents;
