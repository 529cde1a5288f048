//! What every webhook provider shares to serve HTTP: Telegram webhooks, the Meta Cloud API, an
//! e-mail ingest endpoint. Behind the `webhook` feature.
//!
//! A webhook provider is an [`axum::Router`] whose handlers check the request, turn its body
//! into an [`Inbound`](crate::Inbound) and answer the platform with what the bot made of it:
//!
//! - [`IntakeSlot`] holds the [`Intake`](crate::Intake) from [`Provider::start`] until
//!   [`Provider::stop`]. While it is empty every message is answered `503`, so the platform
//!   delivers it again, to another replica or to this one once it runs again.
//! - [`Verdict`](crate::Verdict) is a response: `200` once the message is safe, `503`, `413` or
//!   `400` when it is not.
//! - [`Rejection`] is what a handler answers before the bot sees anything: a wrong secret, a
//!   body that does not parse.
//! - [`secret_matches`] compares a platform's secret token in constant time.
//! - [`harden`] bounds every request by [`Limits`]: body size and time.
//! - [`serve`] runs the router until a shutdown future, such as [`IntakeSlot::closed`],
//!   resolves.
//!
//! # Example
//!
//! The pieces of a provider that takes text messages, checked by a secret header:
//!
//! ```no_run
//! use axum::extract::State;
//! use axum::http::HeaderMap;
//! use axum::response::{IntoResponse, Response};
//! use axum::routing::post;
//! use botmesh_traits::webhook::{self, IntakeSlot, Limits, Rejection};
//! use botmesh_traits::{Inbound, Intake};
//!
//! #[derive(Clone)]
//! struct Hook {
//!     slot: IntakeSlot,
//!     secret: std::sync::Arc<[u8]>,
//! }
//!
//! async fn receive(State(hook): State<Hook>, headers: HeaderMap, body: String) -> Response {
//!     let given = headers.get("x-secret").map(|v| v.as_bytes());
//!     if !webhook::secret_matches(given, &hook.secret) {
//!         return Rejection::Unauthorized.into_response();
//!     }
//!     hook.slot.accept(Inbound::text("example", "m1", "c1", body)).await.into_response()
//! }
//!
//! // In `Provider::start`: bind (so that a port in use fails the start), open the slot, then
//! // serve until `Provider::stop` closes it.
//! async fn start(hook: Hook, intake: Intake) -> std::io::Result<()> {
//!     let listener = tokio::net::TcpListener::bind(("0.0.0.0", 8080)).await?;
//!     hook.slot.open(intake);
//!     let shutdown = hook.slot.closed();
//!     let router = axum::Router::new().route("/hook", post(receive)).with_state(hook);
//!     let router = webhook::harden(router, &Limits::new());
//!     tokio::spawn(webhook::serve_on(listener, router, shutdown));
//!     Ok(())
//! }
//! ```
//!
//! [`Provider::start`]: crate::Provider::start
//! [`Provider::stop`]: crate::Provider::stop

mod limits;
mod rejection;
mod secret;
mod serve;
mod slot;
mod verdict;

/// The axum this module is built on, so that a provider's handlers use the same version.
pub use axum;

pub use limits::{Limits, harden};
pub use rejection::Rejection;
pub use secret::secret_matches;
pub use serve::{serve, serve_on};
pub use slot::IntakeSlot;
