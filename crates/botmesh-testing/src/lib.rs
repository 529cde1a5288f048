//! Test support for botmesh.
//!
//! - [`TestProvider`]: a provider you drive from a test, acting as the users: inject messages,
//!   read what the bot sent, open and close the transport.
//! - [`store_conformance`]: the behaviour every [`Store`](botmesh_traits::Store) must have,
//!   as one function each store crate calls from its own tests against a real backend.
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

mod conformance;
mod test_provider;

pub use conformance::store_conformance;
pub use test_provider::TestProvider;
