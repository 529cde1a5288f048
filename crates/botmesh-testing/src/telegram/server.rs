//! [`TelegramServer`], the test's handle on the stand-in: it starts the HTTP server and the
//! webhook pusher, acts as the users, reads what the bot did, and injects faults.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::faults::Fault;
use super::fixtures;
use super::records::{CallbackAnswer, SentMessage, Webhook, WebhookDelivery};
use super::state::{Config, Shared};
use super::{routing, webhook};

/// Builds a [`TelegramServer`] with other than the default settings.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start()`"]
pub struct TelegramServerBuilder {
    config: Config,
}

impl Default for TelegramServerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TelegramServerBuilder {
    /// The defaults: any well-formed token (`<digits>:<secret>`) is accepted, the bot is
    /// `@botmesh_test_bot` named "botmesh test bot" (its id is the token's digits), and a
    /// failed webhook push is retried after 100 ms, doubling up to 2 s.
    pub fn new() -> Self {
        Self {
            config: Config {
                token: None,
                bot_username: "botmesh_test_bot".to_owned(),
                bot_first_name: "botmesh test bot".to_owned(),
                retry_first: Duration::from_millis(100),
                retry_max: Duration::from_secs(2),
            },
        }
    }

    /// Accepts only this token; any other gets `401 Unauthorized`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(token.into());
        self
    }

    /// The bot's `username`, without `@`, as `getMe` answers it.
    pub fn bot_username(mut self, username: impl Into<String>) -> Self {
        self.config.bot_username = username.into();
        self
    }

    /// The bot's `first_name`, as `getMe` answers it.
    pub fn bot_first_name(mut self, name: impl Into<String>) -> Self {
        self.config.bot_first_name = name.into();
        self
    }

    /// How a failed webhook push is retried: after `first`, then twice as long each time, up
    /// to `max`.
    pub fn webhook_retry(mut self, first: Duration, max: Duration) -> Self {
        self.config.retry_first = first;
        self.config.retry_max = max;
        self
    }

    /// Binds `127.0.0.1:0` and starts serving.
    pub async fn start(self) -> io::Result<TelegramServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(self.config));
        let app = routing::router(Arc::clone(&shared));
        let stopped = shared.stopped();
        // Detached: serving ends by itself once the handle is dropped, after answering what is
        // in flight (long polls end at once). An accept error ends it early, and the test sees
        // its calls refused.
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stopped).await;
        });
        let pusher = tokio::spawn(webhook::push_updates(Arc::clone(&shared)));
        Ok(TelegramServer { addr, shared, pusher })
    }
}

/// A local Telegram Bot API: point a bot's client at [`api_url`](Self::api_url) and act as its
/// users. See the [module docs](super) for what it implements.
///
/// Dropping it stops the server: long polls in flight end, pushes stop.
#[derive(Debug)]
pub struct TelegramServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    pusher: JoinHandle<()>,
}

impl Drop for TelegramServer {
    fn drop(&mut self) {
        self.shared.close();
        self.pusher.abort();
    }
}

impl TelegramServer {
    /// Starts a server with the [default settings](TelegramServerBuilder::new).
    pub async fn start() -> io::Result<Self> {
        TelegramServerBuilder::new().start().await
    }

    /// A builder for other settings.
    pub fn builder() -> TelegramServerBuilder {
        TelegramServerBuilder::new()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to give the client, `http://127.0.0.1:<port>`: calls go to
    /// `{api_url}/bot{token}/{method}`. For teloxide:
    /// `Bot::new(token).set_api_url(server.api_url().parse()?)`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    // --- Acting as the users -------------------------------------------------------------

    /// A user says `text` in a chat (of the [kind its id implies](fixtures::chat_type));
    /// returns the update's id.
    pub fn user_says(&self, chat_id: i64, user_id: i64, text: &str) -> i64 {
        self.user_sends_message(chat_id, user_id, json!({ "text": text }))
    }

    /// A user says `text` in a forum topic (`message_thread_id`) of a supergroup with topics;
    /// returns the update's id.
    pub fn user_says_in_thread(
        &self,
        chat_id: i64,
        thread_id: i64,
        user_id: i64,
        text: &str,
    ) -> i64 {
        self.user_sends_message(
            chat_id,
            user_id,
            json!({
                "text": text,
                "message_thread_id": thread_id,
                "is_topic_message": true,
                "chat": fixtures::forum_chat(chat_id),
            }),
        )
    }

    /// A user replies with `text` to an earlier message of the chat (theirs or the bot's),
    /// which the update quotes in `reply_to_message` if the stand-in knows it; returns the
    /// update's id.
    pub fn user_replies(&self, chat_id: i64, user_id: i64, to_message_id: i64, text: &str) -> i64 {
        let quoted = self.shared.lock().messages.get(&(chat_id, to_message_id)).cloned();
        let quoted =
            quoted.unwrap_or_else(|| fixtures::text_message(chat_id, user_id, to_message_id, ""));
        self.user_sends_message(
            chat_id,
            user_id,
            json!({ "text": text, "reply_to_message": quoted }),
        )
    }

    /// A user sends a message with any content: `content`'s fields (`text`, `photo`, `voice`,
    /// `document`, `location`, `contact`, `caption`, ...; see [`fixtures`]) are added to a
    /// message with a fresh `message_id`, the date, `chat` and `from`, and replace them if
    /// given. Returns the update's id.
    ///
    /// # Panics
    ///
    /// If `content` is not a JSON object.
    pub fn user_sends_message(&self, chat_id: i64, user_id: i64, content: Value) -> i64 {
        let Value::Object(content) = content else {
            panic!("user_sends_message takes a JSON object of message fields");
        };
        self.shared.push_with(|inner| {
            let mut m = fixtures::message(chat_id, user_id, inner.next_message_id(chat_id));
            if let Some(fields) = m.as_object_mut() {
                fields.extend(content);
            }
            json!({ "message": m })
        })
    }

    /// A user sends a photo with these bytes, which `getFile` and the download route then
    /// serve; returns the update's id.
    pub fn user_sends_photo(
        &self,
        chat_id: i64,
        user_id: i64,
        bytes: impl Into<Vec<u8>>,
        caption: Option<&str>,
    ) -> i64 {
        let file_id = self.register_file(bytes);
        let mut content = json!({ "photo": fixtures::photo(&file_id) });
        if let Some(c) = caption {
            content["caption"] = json!(c);
        }
        self.user_sends_message(chat_id, user_id, content)
    }

    /// A user edits their message to `text` (an `edited_message` update); returns the
    /// update's id.
    pub fn user_edits(&self, chat_id: i64, user_id: i64, message_id: i64, text: &str) -> i64 {
        let mut m = fixtures::text_message(chat_id, user_id, message_id, text);
        m["edit_date"] = json!(fixtures::unix_now());
        self.user_sends(json!({ "edited_message": m }))
    }

    /// A user presses an inline button with callback `data` under the bot's message
    /// `on_message_id` (a `callback_query` update carrying that message, as the stand-in
    /// recorded it). Returns the callback query's id, which `answerCallbackQuery` must name.
    pub fn press_button(
        &self,
        chat_id: i64,
        user_id: i64,
        data: &str,
        on_message_id: i64,
    ) -> String {
        let mut query_id = String::new();
        self.shared.push_with(|inner| {
            let message =
                inner.messages.get(&(chat_id, on_message_id)).cloned().unwrap_or_else(|| {
                    let mut m = fixtures::text_message(chat_id, user_id, on_message_id, "");
                    m["from"] = self.shared.bot_user(&format!("{}:x", inner.bot_id));
                    m
                });
            query_id = inner.open_callback();
            json!({
                "callback_query": {
                    "id": query_id,
                    "from": fixtures::user(user_id),
                    "message": message,
                    "chat_instance": format!("{}", chat_id.unsigned_abs()),
                    "data": data,
                }
            })
        });
        query_id
    }

    /// Queues any update: an object such as `{"message": {...}}` or `{"my_chat_member": ...}`
    /// without `update_id`, which the stand-in adds. Returns the update's id.
    ///
    /// # Panics
    ///
    /// If `update` is not a JSON object.
    pub fn user_sends(&self, update: Value) -> i64 {
        assert!(update.is_object(), "user_sends takes a JSON object, e.g. {{\"message\": ...}}");
        self.shared.push_update(update)
    }

    /// Takes the next message id of a chat, for a message built by hand for
    /// [`user_sends`](Self::user_sends).
    pub fn next_message_id(&self, chat_id: i64) -> i64 {
        self.shared.update(|inner| inner.next_message_id(chat_id))
    }

    /// Stores bytes as a file and returns its `file_id`, for messages built by hand: `getFile`
    /// resolves it and the download route serves the bytes.
    pub fn register_file(&self, bytes: impl Into<Vec<u8>>) -> String {
        let bytes = bytes.into();
        self.shared.update(|inner| inner.store_file(bytes))
    }

    // --- Reading what the bot did --------------------------------------------------------

    /// Everything the bot sent to a chat, in order.
    pub fn sent(&self, chat_id: i64) -> Vec<SentMessage> {
        self.shared.lock().sent.iter().filter(|m| m.chat_id == chat_id).cloned().collect()
    }

    /// Everything the bot sent, to any chat, in order.
    pub fn all_sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The texts of the bot's `sendMessage` calls to a chat, in order.
    pub fn sent_texts(&self, chat_id: i64) -> Vec<String> {
        let inner = self.shared.lock();
        let texts = inner.sent.iter().filter(|m| m.chat_id == chat_id && m.method == "sendMessage");
        texts.filter_map(|m| m.text.clone()).collect()
    }

    /// The bot's `answerCallbackQuery` calls, in order.
    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.shared.lock().callback_answers.clone()
    }

    /// The updates not yet confirmed (by a `getUpdates` offset past them, or a 2xx from the
    /// webhook), oldest first, each with its `update_id`.
    pub fn pending_updates(&self) -> Vec<Value> {
        self.shared.lock().queue.iter().cloned().collect()
    }

    /// Every call the bot made that reached a method, in order, in the Bot API's spelling
    /// (`"getUpdates"`), refused ones included.
    pub fn calls(&self) -> Vec<&'static str> {
        self.shared.lock().calls.clone()
    }

    /// How many calls of `method` (in any case) the bot made.
    pub fn call_count(&self, method: &str) -> usize {
        self.shared.lock().calls.iter().filter(|c| c.eq_ignore_ascii_case(method)).count()
    }

    /// The webhook, while one is set.
    pub fn webhook(&self) -> Option<Webhook> {
        self.shared.lock().webhook.clone()
    }

    /// Every attempt to push an update to the webhook, in order, failed ones included.
    pub fn webhook_deliveries(&self) -> Vec<WebhookDelivery> {
        self.shared.lock().deliveries.clone()
    }

    /// How many `getUpdates` calls are in flight now.
    pub fn pollers_now(&self) -> usize {
        self.shared.lock().pollers_now
    }

    /// The most `getUpdates` calls ever in flight at once, a refused one included: above 1
    /// means two pollers overlapped.
    pub fn max_pollers(&self) -> usize {
        self.shared.lock().max_pollers
    }

    /// How many `getUpdates` calls were refused with `409 Conflict: terminated by other
    /// getUpdates request` because another was in flight.
    pub fn conflicts(&self) -> usize {
        self.shared.lock().conflicts
    }

    // --- Faults --------------------------------------------------------------------------

    /// Answers the next call of `method` (in any case, e.g. `"sendMessage"`) with `fault`
    /// instead of running it. Each call queues one fault: queue two to fail the next two
    /// calls.
    pub fn fail_next(&self, method: &str, fault: Fault) {
        let key = method.to_ascii_lowercase();
        self.shared.update(|inner| inner.faults.entry(key).or_default().push_back(fault));
    }

    /// Revokes the token: every call, and every download, is answered `401 Unauthorized`
    /// until [`restore_token`](Self::restore_token).
    pub fn revoke_token(&self) {
        self.shared.update(|inner| inner.revoked = true);
    }

    /// Accepts the token again after [`revoke_token`](Self::revoke_token).
    pub fn restore_token(&self) {
        self.shared.update(|inner| inner.revoked = false);
    }

    // --- Waiting -------------------------------------------------------------------------

    /// Waits until the bot has sent at least `count` messages to a chat, or `within` has
    /// passed, and returns what it sent.
    pub async fn wait_for_sent(
        &self,
        chat_id: i64,
        count: usize,
        within: Duration,
    ) -> Vec<SentMessage> {
        self.shared
            .wait_until(within, |inner| {
                inner.sent.iter().filter(|m| m.chat_id == chat_id).count() >= count
            })
            .await;
        self.sent(chat_id)
    }

    /// Waits until `count` `getUpdates` calls are in flight, or `within` has passed; says
    /// whether they are.
    pub async fn wait_for_pollers(&self, count: usize, within: Duration) -> bool {
        self.shared.wait_until(within, |inner| inner.pollers_now >= count).await
    }

    /// Waits until the bot has answered `count` callback queries, or `within` has passed,
    /// and returns the answers.
    pub async fn wait_for_callback_answers(
        &self,
        count: usize,
        within: Duration,
    ) -> Vec<CallbackAnswer> {
        self.shared.wait_until(within, |inner| inner.callback_answers.len() >= count).await;
        self.callback_answers()
    }

    /// Waits until `count` webhook pushes have been attempted, or `within` has passed, and
    /// returns them.
    pub async fn wait_for_deliveries(
        &self,
        count: usize,
        within: Duration,
    ) -> Vec<WebhookDelivery> {
        self.shared.wait_until(within, |inner| inner.deliveries.len() >= count).await;
        self.webhook_deliveries()
    }
}
