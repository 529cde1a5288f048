//! Test support for botmesh.
//!
//! - [`TestProvider`]: a provider you drive from a test, acting as the users: inject messages,
//!   read what the bot sent, open and close the transport.
//! - `WebhookTestProvider` (feature `webhook`): a shared provider whose platform posts JSON
//!   to an axum endpoint and is answered with the bot's verdict, as Telegram or Meta webhooks
//!   are.
//! - [`MemoryCoordinationHub`] and [`MemoryCoordinator`]: the in-process reference
//!   implementation of a [`Coordinator`](botmesh_traits::Coordinator). Coordinators sharing one
//!   hub coordinate like replicas sharing Redis; [`MemoryCoordinator::crash`] and
//!   [`MemoryCoordinator::set_stalled`] simulate a replica dying or failing to renew its lease.
//! - [`store_conformance`]: the behaviour every [`Store`](botmesh_traits::Store) must have,
//!   as one function each store crate calls from its own tests against a real backend, for
//!   the required methods and every capability the store claims ([`claimed_capabilities`]),
//!   and [`racing_writers`], compare-and-set writers racing across several clients.
//! - [`coordinator_conformance`]: the same for every
//!   [`Coordinator`](botmesh_traits::Coordinator), driven through a [`CoordinatorHarness`] that
//!   starts replicas on one shared backend.
//! - [`provider_conformance`]: the same for every [`Provider`](botmesh_traits::Provider),
//!   driven through a [`ProviderHarness`] over the provider's platform stand-in: status,
//!   acknowledged inbound, receipts, rate limits, malformed input, the exclusive flag.
//! - [`FaultyCoordinator`]: wraps any coordinator so a test can crash or stall its replica.
//! - [`FaultyStore`]: wraps any store so a test can slow down, hang or fail its checkpoint
//!   writes.
//! - [`RedisServer`] and [`RedisCluster`]: private `redis-server` processes on free loopback
//!   ports, with kill, restart and pause controls, so that fault tests never touch the
//!   machine's shared Redis.
//! - [`RedisSentinels`]: a private Sentinel topology (a master, its replica and three
//!   `redis-sentinel` processes) with failover, master kill, revival and empty-restart
//!   controls, for tests of what a failover does to a bot.
//! - [`MongoServer`]: a private MongoDB wire-protocol server (`mockupdb` speaking the protocol,
//!   `mongomock` keeping the data) on a free loopback port, since no real `mongod` runs on the
//!   development machines.
//! - `telegram::TelegramServer` (feature `telegram`): a local Telegram Bot API stand-in that
//!   the real teloxide client (or any Bot API client) runs against, for testing Telegram
//!   bots: users' updates by long poll or webhook push, recorded sends and callback answers,
//!   the one-poller rule, and injected faults (429, 401, 5xx, revoked tokens).
//! - `meta::GraphServer` (feature `meta`): a local stand-in for Meta's Graph API (WhatsApp
//!   Cloud API, Messenger, Instagram messaging) that a bot's real HTTP client runs against,
//!   for testing Meta bots: sends recorded and answered in Graph's shapes, WhatsApp's 24-hour
//!   window, media, injected faults (rate limits, expired token, recipient gone, 5xx), and
//!   signed webhook deliveries spread over several replicas, retried, in order per user.
//! - `whatsapp_web::PhoneNetwork` (feature `whatsapp-web`): a stand-in for WhatsApp behind
//!   `botmesh-whatsapp-web`'s client seam, for testing WhatsApp Web bots: users' messages
//!   delivered to the connected session and acknowledged only when it accepts them, linked
//!   devices and pairing codes, sessions counted per directory, log-outs and replaced
//!   sessions.
//! - `discord::DiscordServer` (feature `discord`): a local Discord stand-in, the API routes a
//!   bot calls and a websocket gateway, that the real serenity client runs against: users'
//!   messages, button presses, slash commands and reactions dispatched to the live sessions,
//!   recorded sends, reactions and interaction callbacks, live gateway sessions counted, and
//!   injected faults (429, heartbeats left unacknowledged, invalid sessions, revoked tokens).
//! - `email::DovecotServer`, `email::ImapProxy` and `email::SmtpSink` (feature `email`): a
//!   private Dovecot IMAP server on a free loopback port (its own configuration, maildir in a
//!   temporary directory, mail delivered through `dovecot-lda`, sessions counted by Dovecot
//!   itself), a proxy to put in front of it that refuses a chosen command with `NO` or freezes
//!   its connections, and an SMTP sink that records what a bot sends and can refuse the next
//!   mail, for testing e-mail bots.
//! - `browser::Browser` (feature `browser`): headless Chromium driven over WebDriver through a
//!   private `chromedriver` on a free loopback port, for tests that load a bot's HTML pages in
//!   a real browser: read an element's text, wait for it to change, save a screenshot.
//!
//! # Example
//!
//! ```
//! use botmesh_core::Bot;
//! use botmesh_testing::TestProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = TestProvider::new();
//! let bot = Bot::builder()
//!     .provider(provider.clone())
//!     .on_message(|ctx| async move {
//!         ctx.reply(ctx.body().to_uppercase()).await?;
//!         Ok::<_, botmesh_core::BotError>(())
//!     })
//!     .build()?;
//! bot.start().await?;
//! provider.say("ana", "hello");
//! provider.settled(&bot).await;
//! assert_eq!(provider.texts_to("ana"), ["HELLO"]);
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

// The provider guide; its example is a `WebhookTestProvider` run against the conformance suite.
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod guide {
    #![doc = include_str!("../guide.md")]
}

#[cfg(feature = "browser")]
pub mod browser;
mod conformance;
mod coordinator_conformance;
#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "email")]
pub mod email;
mod faulty;
mod faulty_store;
#[cfg(any(feature = "telegram", feature = "meta"))]
mod http;
mod memory_coordinator;
#[cfg(feature = "meta")]
pub mod meta;
mod mongo_server;
mod provider_conformance;
mod redis_sentinel;
mod redis_server;
mod sent_log;
#[cfg(feature = "telegram")]
pub mod telegram;
mod test_provider;
#[cfg(feature = "webhook")]
mod webhook_provider;
#[cfg(feature = "whatsapp-web")]
pub mod whatsapp_web;

#[cfg(feature = "browser")]
pub use browser::Browser;
pub use conformance::{claimed_capabilities, racing_writers, store_conformance};
pub use coordinator_conformance::{CoordinatorHarness, coordinator_conformance};
#[cfg(feature = "discord")]
pub use discord::DiscordServer;
pub use faulty::FaultyCoordinator;
pub use faulty_store::FaultyStore;
pub use memory_coordinator::{MemoryCoordinationHub, MemoryCoordinator};
#[cfg(feature = "meta")]
pub use meta::GraphServer;
pub use mongo_server::MongoServer;
pub use provider_conformance::{ProviderHarness, provider_conformance};
pub use redis_sentinel::RedisSentinels;
pub use redis_server::{RedisCluster, RedisServer};
#[cfg(feature = "telegram")]
pub use telegram::TelegramServer;
pub use test_provider::TestProvider;
#[cfg(feature = "webhook")]
pub use webhook_provider::{SECRET_HEADER, WEBHOOK_PATH, WebhookTestProvider};
