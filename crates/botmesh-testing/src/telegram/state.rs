//! The stand-in's state: the update queue with its offset semantics, the chats' message
//! counters, issued files and callback queries, and everything recorded for the test.
//!
//! One `std::sync::Mutex` guards it all and is never held across an `.await`. Two `Notify`s
//! wake waiters: `updates` (an update was queued or the webhook changed: long polls and the
//! webhook pusher) and `changed` (anything was recorded: the test's `wait_for_*` helpers).

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::faults::{ApiError, Fault};
use super::records::{CallbackAnswer, SentMessage, Webhook, WebhookDelivery};

/// What a server is started with.
#[derive(Debug, Clone)]
pub(super) struct Config {
    /// The one token accepted, or `None` for any well-formed token.
    pub(super) token: Option<String>,
    pub(super) bot_username: String,
    pub(super) bot_first_name: String,
    /// The first delay before a failed webhook push is retried; it doubles up to `retry_max`.
    pub(super) retry_first: Duration,
    pub(super) retry_max: Duration,
}

/// A file the stand-in issued a `file_id` for.
#[derive(Debug, Clone)]
pub(super) struct StoredFile {
    pub(super) path: String,
    pub(super) bytes: Vec<u8>,
}

/// Everything behind the lock.
#[derive(Debug)]
pub(super) struct Inner {
    next_update_id: i64,
    /// Updates not yet confirmed, oldest first, each with its `update_id`.
    pub(super) queue: VecDeque<Value>,
    next_message_id: HashMap<i64, i64>,
    /// Every message so far, user's and bot's, by `(chat_id, message_id)`: what replies quote
    /// and callback queries carry.
    pub(super) messages: HashMap<(i64, i64), Value>,
    pub(super) sent: Vec<SentMessage>,
    next_callback: u64,
    /// Callback queries issued and not yet answered.
    pub(super) open_callbacks: HashSet<String>,
    pub(super) callback_answers: Vec<CallbackAnswer>,
    next_file: u64,
    /// Files by `file_id`.
    pub(super) files: HashMap<String, StoredFile>,
    /// Faults queued per method, keyed by the lowercase method name.
    pub(super) faults: HashMap<String, VecDeque<Fault>>,
    pub(super) revoked: bool,
    pub(super) pollers_now: usize,
    pub(super) max_pollers: usize,
    pub(super) conflicts: usize,
    pub(super) webhook: Option<Webhook>,
    pub(super) deliveries: Vec<WebhookDelivery>,
    /// When the last push failed and why, for `getWebhookInfo`.
    pub(super) last_webhook_error: Option<(i64, String)>,
    /// Every call's method, in the Bot API's spelling.
    pub(super) calls: Vec<&'static str>,
    /// The bot's id, from the token of the last call (1 before any).
    pub(super) bot_id: i64,
}

impl Inner {
    fn new() -> Self {
        Self {
            next_update_id: 1,
            queue: VecDeque::new(),
            next_message_id: HashMap::new(),
            messages: HashMap::new(),
            sent: Vec::new(),
            next_callback: 1,
            open_callbacks: HashSet::new(),
            callback_answers: Vec::new(),
            next_file: 1,
            files: HashMap::new(),
            faults: HashMap::new(),
            revoked: false,
            pollers_now: 0,
            max_pollers: 0,
            conflicts: 0,
            webhook: None,
            deliveries: Vec::new(),
            last_webhook_error: None,
            calls: Vec::new(),
            bot_id: 1,
        }
    }

    /// The next message id in a chat: ids count up per chat, shared by users and the bot.
    pub(super) fn next_message_id(&mut self, chat_id: i64) -> i64 {
        let next = self.next_message_id.entry(chat_id).or_insert(1);
        let id = *next;
        *next += 1;
        id
    }

    /// Keeps a message so that replies and callback queries can quote it. A quoted message
    /// does not quote further, as on Telegram.
    pub(super) fn remember(&mut self, message: &Value) {
        let (Some(chat), Some(id)) =
            (message["chat"]["id"].as_i64(), message["message_id"].as_i64())
        else {
            return;
        };
        let mut kept = message.clone();
        if let Some(m) = kept.as_object_mut() {
            m.remove("reply_to_message");
        }
        self.messages.insert((chat, id), kept);
    }

    /// Issues a `file_id` for bytes.
    pub(super) fn store_file(&mut self, bytes: Vec<u8>) -> String {
        let n = self.next_file;
        self.next_file += 1;
        let file_id = format!("BQACAgIAAx{n:08}");
        self.files.insert(file_id.clone(), StoredFile { path: format!("files/file_{n}"), bytes });
        file_id
    }

    /// Issues a callback query id.
    pub(super) fn open_callback(&mut self) -> String {
        let id = format!("{}", 4_000_000_000_000_000_000_u64 + self.next_callback);
        self.next_callback += 1;
        self.open_callbacks.insert(id.clone());
        id
    }

    /// Queues an update, giving it the next `update_id`.
    fn queue_update(&mut self, mut update: Value) -> i64 {
        let id = self.next_update_id;
        self.next_update_id += 1;
        if let Some(m) = update.as_object_mut() {
            m.insert("update_id".to_owned(), json!(id));
        }
        for kind in ["message", "edited_message", "channel_post", "edited_channel_post"] {
            if update.get(kind).is_some_and(Value::is_object) {
                let message = update[kind].clone();
                self.remember(&message);
            }
        }
        self.queue.push_back(update);
        id
    }

    /// Confirms updates as `getUpdates` with this `offset` does: a positive offset forgets
    /// every update below it; a negative one keeps only the last `-offset` updates.
    pub(super) fn confirm(&mut self, offset: i64) {
        if offset > 0 {
            self.queue.retain(|u| update_id(u) >= offset);
        } else if offset < 0 {
            let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
            let drop = self.queue.len().saturating_sub(keep);
            self.queue.drain(..drop);
        }
    }

    /// Up to `limit` queued updates with ids at or above `offset`, oldest first.
    pub(super) fn updates_from(&self, offset: i64, limit: usize) -> Vec<Value> {
        self.queue.iter().filter(|u| update_id(u) >= offset).take(limit).cloned().collect()
    }
}

/// An update's id.
pub(super) fn update_id(update: &Value) -> i64 {
    update["update_id"].as_i64().unwrap_or_default()
}

/// The state shared by the HTTP handlers, the webhook pusher and the test's handle.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: Config,
    inner: Mutex<Inner>,
    /// Woken when an update is queued, the webhook changes, or the server stops.
    pub(super) updates: Notify,
    /// Woken whenever anything is recorded.
    changed: Notify,
    /// Becomes `true` once, when the server stops.
    closed: watch::Sender<bool>,
}

impl Shared {
    pub(super) fn new(config: Config) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner::new()),
            updates: Notify::new(),
            changed: Notify::new(),
            closed: watch::Sender::new(false),
        }
    }

    /// The state, for reading; changes go through [`update`](Self::update).
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the state and wakes the test's waits.
    pub(super) fn update<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.notify_waiters();
        r
    }

    /// Queues an update (an object without `update_id`) and wakes long polls and the pusher.
    pub(super) fn push_update(&self, update: Value) -> i64 {
        let id = self.update(|inner| inner.queue_update(update));
        self.updates.notify_waiters();
        id
    }

    /// Builds an update from the state (e.g. to take a message id) and queues it.
    pub(super) fn push_with(&self, build: impl FnOnce(&mut Inner) -> Value) -> i64 {
        let id = self.update(|inner| {
            let update = build(inner);
            inner.queue_update(update)
        });
        self.updates.notify_waiters();
        id
    }

    /// Whether the server has stopped.
    pub(super) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the server stops.
    pub(super) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut closed = self.closed.subscribe();
        async move {
            // An error means the sender is gone, which also means stopped.
            let _ = closed.wait_for(|c| *c).await;
        }
    }

    /// Stops long polls and the pusher.
    pub(super) fn close(&self) {
        self.closed.send_replace(true);
        self.updates.notify_waiters();
        self.changed.notify_waiters();
    }

    /// Checks a token: `401 Unauthorized` when revoked, malformed (not `<digits>:<secret>`), or
    /// not the one token the server was started with.
    pub(super) fn authorize(&self, token: &str) -> Result<(), ApiError> {
        let well_formed = token.split_once(':').is_some_and(|(id, secret)| {
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && !secret.is_empty()
        });
        let expected = self.config.token.as_deref().is_none_or(|t| t == token);
        if !well_formed || !expected || self.lock().revoked {
            return Err(ApiError::unauthorized());
        }
        Ok(())
    }

    /// The bot's user id: the digits before the token's colon.
    pub(super) fn bot_id(token: &str) -> i64 {
        token.split_once(':').and_then(|(id, _)| id.parse().ok()).unwrap_or(1)
    }

    /// The bot as a `User`.
    pub(super) fn bot_user(&self, token: &str) -> Value {
        json!({
            "id": Self::bot_id(token),
            "is_bot": true,
            "first_name": self.config.bot_first_name,
            "username": self.config.bot_username,
        })
    }

    /// Waits until `done` holds or `within` passes; says whether it holds.
    pub(super) async fn wait_until(&self, within: Duration, done: impl Fn(&Inner) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            if done(&self.lock()) {
                return true;
            }
            if self.is_closed() || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(&self.lock());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(inner: &Inner) -> Vec<i64> {
        inner.queue.iter().map(update_id).collect()
    }

    #[test]
    fn offsets_confirm_and_select() {
        let mut inner = Inner::new();
        for _ in 0..5 {
            inner.queue_update(json!({}));
        }
        assert_eq!(queued(&inner), [1, 2, 3, 4, 5]);
        inner.confirm(0);
        assert_eq!(queued(&inner), [1, 2, 3, 4, 5]);
        inner.confirm(3);
        assert_eq!(queued(&inner), [3, 4, 5]);
        assert_eq!(inner.updates_from(4, 100).iter().map(update_id).collect::<Vec<_>>(), [4, 5]);
        assert_eq!(inner.updates_from(0, 1).iter().map(update_id).collect::<Vec<_>>(), [3]);
        inner.confirm(-1);
        assert_eq!(queued(&inner), [5]);
        inner.confirm(-10);
        assert_eq!(queued(&inner), [5]);
    }

    #[test]
    fn message_ids_count_per_chat() {
        let mut inner = Inner::new();
        assert_eq!(inner.next_message_id(1), 1);
        assert_eq!(inner.next_message_id(1), 2);
        assert_eq!(inner.next_message_id(-5), 1);
    }

    #[test]
    fn tokens_are_checked() {
        let shared = Shared::new(Config {
            token: None,
            bot_username: "b".to_owned(),
            bot_first_name: "b".to_owned(),
            retry_first: Duration::from_millis(1),
            retry_max: Duration::from_millis(1),
        });
        assert!(shared.authorize("123:abc").is_ok());
        for bad in ["", "123", "abc:def", "123:", ":abc"] {
            assert_eq!(shared.authorize(bad).unwrap_err().code, 401, "{bad:?}");
        }
        shared.update(|i| i.revoked = true);
        assert_eq!(shared.authorize("123:abc").unwrap_err().code, 401);
    }
}
