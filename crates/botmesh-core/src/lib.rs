//! The botmesh bot runtime.
//!
//! A [`Bot`] joins a [`Provider`](traits::Provider) (the transport), a
//! [`Store`](traits::Store) (its state) and what it serves:
//! [`Flow`]s written as steps, free-form [`Conversation`]s written as async functions, message
//! handlers, and `before_message` hooks.
//!
//! # Key design decision
//!
//! Every chat key (see [`ChatKey`]) has one FIFO queue and one worker task. The worker handles
//! the chat's messages one at a time and drives the chat's live conversation itself: a waiting
//! conversation is a parked future, and a message's turn ends when that future ends or parks
//! again. Different chats run in parallel. The same boundary is where replicas take and release
//! a chat's turn when coordination is configured.
//!
//! # Example
//!
//! ```
//! use botmesh_core::{Ask, Bot, Flow, Step, Trigger};
//! # use botmesh_testing::TestProvider;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let provider = TestProvider::new();
//! let bot = Bot::builder()
//!     .provider(provider.clone())
//!     .flow(
//!         Flow::new("greet")
//!             .trigger(Trigger::keyword("hi"))
//!             .ask(Ask::new("name", "What's your name?"))
//!             .do_step("done", |c| async move {
//!                 let name: String = c.get("name").unwrap_or_default();
//!                 c.send(format!("Nice to meet you, {name}!")).await?;
//!                 Ok::<_, botmesh_core::BotError>(Step::End)
//!             }),
//!     )
//!     .build()?;
//! bot.start().await?;
//! provider.say("chat-1", "hi");
//! provider.say("chat-1", "Ada");
//! provider.settled(&bot).await;
//! assert_eq!(provider.texts_to("chat-1"), ["What's your name?", "Nice to meet you, Ada!"]);
//! bot.stop().await?;
//! # Ok(()) }
//! ```
//!
//! # Messages from an endpoint of your own
//!
//! A provider hands messages to the bot by itself. Code that receives them another way (a
//! webhook route of your own, a queue consumer) hands each to [`Bot::accept`] and answers
//! its sender from the outcome: once `accept` returns `Ok`, the message holds its place in
//! its chat's queue (and is journaled, with durability), so the sender may forget it; on an
//! error it was not taken, and the sender should deliver it again. [`Bot::dispatch`] does the
//! same without waiting, for senders that do not retry.
//!
//! ```
//! use botmesh_core::{Bot, Inbound};
//!
//! /// The HTTP status a webhook answers a delivery with.
//! async fn deliver(bot: &Bot, message: Inbound) -> u16 {
//!     match bot.accept(message).await {
//!         Ok(accepted) => {
//!             if accepted.is_duplicate() {
//!                 tracing::debug!("delivered again; handled once");
//!             }
//!             200
//!         }
//!         Err(_) => 503,
//!     }
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let bot = Bot::builder().provider(botmesh_testing::TestProvider::new()).build()?;
//! # bot.start().await?;
//! # let m = Inbound::text("test", "m1", "chat", "hi");
//! # assert_eq!(deliver(&bot, m.clone()).await, 200);
//! # assert_eq!(deliver(&bot, m).await, 200);
//! # bot.stop().await?;
//! # Ok(()) }
//! ```
//!
//! # Where things are
//!
//! The crate root holds what a bot author uses: [`Bot`] and its builder, flows and
//! conversations with their contexts ([`Ctx`], [`ConvCtx`]), events, errors, and the message
//! types handlers read and send. The rest is grouped by who needs it:
//!
//! - [`traits`]: the contract for whoever writes a provider, a store or a coordination
//!   backend: the [`Provider`](traits::Provider), [`Store`](traits::Store) and
//!   [`Coordinator`](traits::Coordinator) traits and the records they exchange with the
//!   runtime. A bot author never needs it; its `Result` is the contract's, while the root's
//!   [`Result`] carries a [`BotError`].
//! - [`coordination`]: running the bot as several replicas.
//! - [`scheduler`], [`retry`], [`texts`]: scheduled jobs, retry policies, built-in texts.
//! - [`status`] and [`telemetry`]: what a replica reports about itself.
//! - [`guide`]: the guides to conversation hand-over and durability, leaving a conversation,
//!   scheduled jobs and fenced locks, and migrating to the stable API.
//!
//! # Feature flags
//!
//! - `cron` (on by default): jobs on cron expressions ([`Timing::cron`]).
//! - `serde` (off by default): deserialize the settings a bot is configured with
//!   ([`Durability`], [`Handover`], [`TaskOptions`], [`Timing`]) from configuration files,
//!   durations as text (`"30s"`, `"2m"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod accepted;
mod bot;
mod boxing;
mod builder;
mod catch_up;
mod checkpoint;
mod clock;
mod conv;
pub mod coordination;
mod ctx;
mod dispatcher;
mod durable;
mod error;
mod event;
mod flow;
pub mod guide;
mod handover;
mod lock;
mod memory_store;
mod message;
mod observe;
mod outbox;
mod providers;
mod repair;
pub mod retry;
mod runner;
pub mod scheduler;
mod shared;
pub mod status;
pub mod telemetry;
pub mod texts;
mod transport;
mod trigger;

pub use accepted::Accepted;
pub use bot::Bot;
pub use builder::BotBuilder;
pub use conv::ConvCtx;
pub use ctx::Ctx;
pub use durable::Durability;
pub use error::{BotError, ConfigError, Result};
pub use event::{EndReason, Event, FollowReason, HandoverOutcome, Warning};
pub use flow::{Ask, Conversation, Flow, Step};
pub use handover::{Fallback, FallbackFn, FallbackReason, FlowHandover, Handover, HandoverInfo};
pub use memory_store::MemoryStore;
pub use message::Message;
pub use observe::shutdown_signal;
pub use scheduler::{JobCtx, Missed, SchedulerLease, TaskOptions, Timing};
pub use texts::Texts;
pub use trigger::Trigger;

#[doc(no_inline)]
pub use botmesh_traits as traits;
pub use botmesh_traits::{
    Button, ChatId, ChatKey, Contact, Content, Delivery, DeliveryStatus, Error, ErrorKind, Inbound,
    LeaseLostReason, Media, MediaKind, MediaSource, MessageId, Outbound, OutboundContent,
    SendReceipt, TransportStatus,
};
