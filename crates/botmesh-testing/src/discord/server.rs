//! [`DiscordServer`], the test's handle on the stand-in: it starts the server, acts as the
//! users, reads what the bot did, and injects faults.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::api;
use super::fixtures::{self, Author};
use super::records::{Fault, InteractionCallback, SentMessage, SentReaction};
use super::state::{Config, Frame, Shared};

/// Builds a [`DiscordServer`] with other than the default settings.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start()`"]
pub struct DiscordServerBuilder {
    config: Config,
}

impl Default for DiscordServerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DiscordServerBuilder {
    /// The defaults: the token `discord-test-token`, a bot user `botmesh-test` (id
    /// `100000000000000001`), heartbeats every 41.25 s as Discord asks, and 1000 session starts
    /// a day.
    pub fn new() -> Self {
        Self {
            config: Config {
                token: "discord-test-token".to_owned(),
                bot_id: 100_000_000_000_000_001,
                bot_name: "botmesh-test".to_owned(),
                app_id: 100_000_000_000_000_002,
                heartbeat: Duration::from_millis(41_250),
                session_starts: 1000,
                session_reset: Duration::from_secs(86_400),
            },
        }
    }

    /// The only token accepted (with or without the `Bot ` prefix).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.config.token = token.into();
        self
    }

    /// The heartbeat interval `HELLO` asks for.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat = interval;
        self
    }

    /// How many sessions may start (`IDENTIFY`) per `reset_after`, as `/gateway/bot` reports.
    pub fn session_start_limit(mut self, total: u64, reset_after: Duration) -> Self {
        self.config.session_starts = total;
        self.config.session_reset = reset_after;
        self
    }

    /// Binds `127.0.0.1:0` and starts serving.
    pub async fn start(self) -> io::Result<DiscordServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(self.config));
        *shared.base.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            format!("http://{addr}");
        let app = api::router(Arc::clone(&shared));
        let stopped = shared.stopped();
        // Detached: serving ends once the handle is dropped, and every gateway connection with it.
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stopped).await;
        });
        Ok(DiscordServer { addr, shared })
    }
}

/// A local Discord: point a bot's HTTP client at [`url`](Self::url) (serenity:
/// `HttpBuilder::new(token).proxy(url)`), and act as its users. See the
/// [module docs](super) for what it implements.
///
/// Dropping it stops the server and closes every gateway connection.
#[derive(Debug)]
pub struct DiscordServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Drop for DiscordServer {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl DiscordServer {
    /// Starts a server with the [default settings](DiscordServerBuilder::new).
    pub async fn start() -> io::Result<Self> {
        DiscordServerBuilder::new().start().await
    }

    /// A builder for other settings.
    pub fn builder() -> DiscordServerBuilder {
        DiscordServerBuilder::new()
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:P`: the proxy URL a client sends its API calls to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token the stand-in accepts.
    pub fn token(&self) -> &str {
        &self.shared.config.token
    }

    /// The bot's user id.
    pub fn bot_id(&self) -> u64 {
        self.shared.config.bot_id
    }

    // --- Acting as the users ---------------------------------------------------------------

    /// `author` writes `text` in `channel`: a `MESSAGE_CREATE` to every live session. Returns
    /// the message's id. Said while no session is live, it is lost, as on Discord.
    pub fn user_says(&self, channel: u64, author: &Author, text: &str) -> u64 {
        self.user_writes(channel, author, text, |_| {})
    }

    /// `author` replies to message `to` in `channel` with `text`.
    pub fn user_replies(&self, channel: u64, author: &Author, to: u64, text: &str) -> u64 {
        self.user_writes(channel, author, text, |m| {
            m["message_reference"] =
                serde_json::json!({"message_id": to.to_string(), "channel_id": channel.to_string()});
        })
    }

    /// `author` sends a file with a caption; the stand-in serves its bytes at the attachment's
    /// URL.
    pub fn user_sends_file(
        &self,
        channel: u64,
        author: &Author,
        file_name: &str,
        mime: &str,
        data: &[u8],
        caption: &str,
    ) -> u64 {
        let file = self.shared.next_id();
        let url = format!("{}/attachments/{file}/{file_name}", self.url());
        self.shared
            .lock()
            .files
            .insert(format!("{file}/{file_name}"), (mime.to_owned(), data.to_vec()));
        let attachment = fixtures::attachment(file, file_name, mime, data.len(), &url);
        self.user_writes(channel, author, caption, |m| {
            m["attachments"] = Value::from(vec![attachment])
        })
    }

    /// A message as `author` writes it, changed by `edit` before it is dispatched.
    pub fn user_writes(
        &self,
        channel: u64,
        author: &Author,
        text: &str,
        edit: impl FnOnce(&mut Value),
    ) -> u64 {
        let id = self.shared.next_id();
        let user = fixtures::user(author.user, &author.name, false);
        let mut message = fixtures::message(id, channel, &user, author.guild, text);
        edit(&mut message);
        self.shared.lock().messages.insert(id, message.clone());
        self.shared.dispatch("MESSAGE_CREATE", &message);
        id
    }

    /// `author` presses the button `custom_id` of message `message` (one the bot sent): an
    /// `INTERACTION_CREATE`. Returns the interaction's id; its callback is timed from now.
    pub fn press_button(&self, author: &Author, message: u64, custom_id: &str) -> u64 {
        let id = self.shared.next_id();
        let known = self.shared.lock().messages.get(&message).cloned();
        let message = known.unwrap_or_else(|| {
            let bot = self.shared.bot_user();
            fixtures::message(message, 0, &bot, author.guild, "")
        });
        let app = self.shared.config.app_id;
        let token = format!("interaction-token-{id}");
        let interaction = fixtures::button_press(id, app, &token, author, &message, custom_id);
        self.shared.lock().dispatched.insert(id, Instant::now());
        self.shared.dispatch("INTERACTION_CREATE", &interaction);
        id
    }

    /// `author` runs the slash command `/name` with string `options` in `channel`. Returns the
    /// interaction's id.
    pub fn slash_command(
        &self,
        channel: u64,
        author: &Author,
        name: &str,
        options: &[(&str, &str)],
    ) -> u64 {
        let id = self.shared.next_id();
        let app = self.shared.config.app_id;
        let token = format!("interaction-token-{id}");
        let interaction = fixtures::slash_command(id, app, &token, author, channel, name, options);
        self.shared.lock().dispatched.insert(id, Instant::now());
        self.shared.dispatch("INTERACTION_CREATE", &interaction);
        id
    }

    /// `author` reacts to `message` with `emoji` (`MESSAGE_REACTION_ADD`), or takes the
    /// reaction back (`MESSAGE_REACTION_REMOVE`) when `added` is `false`.
    pub fn react(&self, channel: u64, author: &Author, message: u64, emoji: &str, added: bool) {
        let event = if added { "MESSAGE_REACTION_ADD" } else { "MESSAGE_REACTION_REMOVE" };
        self.shared.dispatch(event, &fixtures::reaction(channel, message, author, emoji));
    }

    /// Sends any dispatch `t` with payload `d` to every live session; returns how many it
    /// reached.
    pub fn dispatch(&self, t: &str, d: &Value) -> usize {
        self.shared.dispatch(t, d)
    }

    // --- Reading what the bot did ------------------------------------------------------------

    /// Every message the bot created, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The contents of the messages the bot created in `channel`, in order.
    pub fn sent_texts(&self, channel: u64) -> Vec<String> {
        let s = self.shared.lock();
        s.sent.iter().filter(|m| m.channel == channel).map(|m| m.content.clone()).collect()
    }

    /// Waits until the bot created `n` messages in `channel`, or panics after `within`.
    pub async fn wait_for_sent(
        &self,
        channel: u64,
        n: usize,
        within: Duration,
    ) -> Vec<SentMessage> {
        let deadline = Instant::now() + within;
        loop {
            let sent: Vec<SentMessage> =
                self.sent().into_iter().filter(|m| m.channel == channel).collect();
            if sent.len() >= n {
                return sent;
            }
            assert!(Instant::now() < deadline, "channel {channel} got {sent:?}, wanted {n}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The reactions the bot added and removed, in order.
    pub fn reactions(&self) -> Vec<SentReaction> {
        self.shared.lock().reactions.clone()
    }

    /// The interaction callbacks the bot posted, in order.
    pub fn callbacks(&self) -> Vec<InteractionCallback> {
        self.shared.lock().callbacks.clone()
    }

    // --- Sessions ------------------------------------------------------------------------------

    /// How many gateway sessions are live now (identified or resumed, connection open).
    pub fn live_sessions(&self) -> usize {
        self.shared.lock().live
    }

    /// The most sessions that were ever live at once.
    pub fn max_live_sessions(&self) -> usize {
        self.shared.lock().max_live
    }

    /// When each accepted `IDENTIFY` arrived, in order.
    pub fn identifies(&self) -> Vec<Instant> {
        self.shared.lock().identifies.clone()
    }

    /// How many sessions were resumed.
    pub fn resumes(&self) -> usize {
        self.shared.lock().resumes
    }

    /// How many `IDENTIFY`s were refused for their token (closed with `4004`).
    pub fn refused_identifies(&self) -> usize {
        self.shared.lock().refused
    }

    // --- Faults --------------------------------------------------------------------------------

    /// Answers the next create-message call with `fault` (several calls queue up in order).
    pub fn fail_next_send(&self, fault: Fault) {
        self.shared.lock().send_faults.push_back(fault);
    }

    /// From now on, heartbeats are not acknowledged, on every connection, until
    /// [`resume_acking`](Self::resume_acking): a client sees its connection as a zombie.
    pub fn stop_acking(&self) {
        self.shared.lock().acking = false;
    }

    /// Heartbeats are acknowledged again.
    pub fn resume_acking(&self) {
        self.shared.lock().acking = true;
    }

    /// Sends `INVALID_SESSION` to every live session; unless `resumable`, the sessions are
    /// forgotten and a `RESUME` of them is refused.
    pub fn invalidate_sessions(&self, resumable: bool) {
        self.shared.invalidate(resumable);
    }

    /// Sends `RECONNECT` (op 7) on every connection: the client should resume elsewhere.
    pub fn request_reconnect(&self) {
        self.shared.broadcast(|| Frame::Text(serde_json::json!({"op": 7, "d": null}).to_string()));
    }

    /// Revokes the token: every API call is `401`, every connection is closed with `4004`
    /// (authentication failed), and every `IDENTIFY` and `RESUME` refused.
    pub fn revoke_token(&self) {
        self.shared.lock().revoked = true;
        self.shared.broadcast(|| Frame::Close(4004, "authentication failed"));
    }
}
