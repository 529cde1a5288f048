//! A local Discord stand-in (feature `discord`): an HTTP server on `127.0.0.1:0` that serves
//! the API routes a bot calls and a websocket gateway, so that a real client (serenity, or any
//! other) runs against it in tests.
//!
//! Point the bot's HTTP client at [`DiscordServer::url`] (serenity:
//! `HttpBuilder::new(token).proxy(url)`, which sends every call to `{url}/api/v10/...`); the
//! gateway's URL comes from the stand-in's `GET /api/v10/gateway/bot` answer. Then act as the
//! users ([`DiscordServer::user_says`], [`DiscordServer::press_button`],
//! [`DiscordServer::slash_command`], [`DiscordServer::react`]) and read what the bot did
//! ([`DiscordServer::sent`], [`DiscordServer::callbacks`], [`DiscordServer::reactions`]).
//!
//! # What it implements
//!
//! - HTTP, with `Authorization: Bot <token>` checked (`401` otherwise): `GET /gateway` and
//!   `/gateway/bot` (the websocket URL, one shard, the session start limit), `GET
//!   /users/@me`, `POST /channels/{id}/messages` (JSON or `multipart/form-data` with
//!   `payload_json` and files; content, replies, action rows of buttons and embed images are
//!   recorded as [`SentMessage`]s), `PUT`/`DELETE` of the bot's own reactions, and `POST
//!   /interactions/{id}/{token}/callback` (recorded as [`InteractionCallback`]s, with how long
//!   after the interaction's dispatch it came; a second callback for one interaction is `400`,
//!   as on Discord). Files users send are served at `/attachments/{id}/{name}`.
//! - The gateway at `/gateway`: `HELLO` with the heartbeat interval, `IDENTIFY` (a wrong token
//!   is closed with `4004`) answered by `READY`, heartbeats answered by `HEARTBEAT_ACK` (unless
//!   told to stop), `RESUME` of a known session answered by the missed dispatches and
//!   `RESUMED` (an unknown one by `INVALID_SESSION`), and numbered dispatches of what the test
//!   makes users do (`MESSAGE_CREATE`, `INTERACTION_CREATE`, `MESSAGE_REACTION_ADD`, ...) to
//!   every live session.
//! - Sessions are counted: [`DiscordServer::live_sessions`] and the most ever live at once,
//!   [`DiscordServer::max_live_sessions`], so a test can check that one gateway session runs
//!   at any instant; [`DiscordServer::identifies`] says when each started.
//! - Faults: [`DiscordServer::fail_next_send`] (a `429` with or without `Retry-After`, any
//!   status with a Discord error code), [`DiscordServer::stop_acking`],
//!   [`DiscordServer::invalidate_sessions`], [`DiscordServer::request_reconnect`] and
//!   [`DiscordServer::revoke_token`].
//!
//! Events users cause while no session is live are lost, as on Discord.

mod api;
pub mod fixtures;
mod gateway;
mod records;
mod server;
mod state;

#[cfg(test)]
mod tests;

pub use fixtures::Author;
pub use records::{Fault, InteractionCallback, SentButton, SentFile, SentMessage, SentReaction};
pub use server::{DiscordServer, DiscordServerBuilder};
