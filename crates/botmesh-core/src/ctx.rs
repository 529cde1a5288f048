//! The context a message handler runs with.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use botmesh_traits::{Bytes, ChatId, ChatKey, Outbound, OutboundContent, SendReceipt};
use serde::Serialize;
use serde_json::Value;

use crate::coordination::TurnSlot;
use crate::shared::Shared;
use crate::{Message, Result};

/// What a message handler gets: the message, and ways to answer it.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    shared: Arc<Shared>,
    turn: Arc<TurnSlot>,
    message: Arc<Message>,
    start: Arc<Mutex<Option<String>>>,
    /// With durability: the outbox key prefix of this handler's sends, and their count.
    outbox: Option<Arc<(String, AtomicU32)>>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("message", &self.message).finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for handler number `handler` of `message`, or for the hand-over fallback
    /// function when `None`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        turn: Arc<TurnSlot>,
        message: Message,
        handler: Option<usize>,
    ) -> Self {
        let outbox = shared.durability.is_some().then(|| {
            let id = crate::durable::journal_id(&message.inbound);
            let slot = handler.map_or_else(|| "fallback".to_owned(), |h| format!("h{h}"));
            Arc::new((format!("{}|{id}|{slot}", message.key()), AtomicU32::new(0)))
        });
        Self { shared, turn, message: Arc::new(message), start: Arc::default(), outbox }
    }

    /// The outbox key of the next send, with durability.
    fn outbox_key(&self) -> Option<String> {
        self.outbox.as_ref().map(|o| format!("{}|{}", o.0, o.1.fetch_add(1, Ordering::SeqCst)))
    }

    /// The message, after the `before_message` hooks.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The message's body.
    pub fn body(&self) -> &str {
        &self.message.body
    }

    /// The ordering key of the chat (see [`ChatKey`]).
    pub fn key(&self) -> ChatKey {
        self.message.key()
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        self.message.chat()
    }

    /// The message's language, if known.
    pub fn lang(&self) -> Option<&str> {
        self.message.lang.as_deref()
    }

    /// The fence of the chat's turn this handler runs under: it grows with every grant of the
    /// chat's turn, so a resource of your own can refuse a write carrying a fence lower than
    /// one it has seen. `None` without coordination.
    pub fn fence(&self) -> Option<u64> {
        self.turn.fence()
    }

    /// A built-in or overridden text in the message's language.
    pub fn text<'a>(&'a self, key: &'a str) -> &'a str {
        self.shared.def.texts.get(self.lang(), key)
    }

    /// Sends a text to the chat the message came from.
    ///
    /// With durability, the send is recorded in the outbox first, so that the same message
    /// handled again (replayed after a crash) does not send it twice; the receipt of a skipped
    /// send has no id.
    pub async fn reply(&self, text: impl Into<String>) -> Result<SendReceipt> {
        let message =
            Outbound::new(self.chat().clone(), OutboundContent::Text { body: text.into() });
        self.send(&message).await
    }

    /// Sends any message, fenced by the chat's turn and deduplicated like [`Ctx::reply`].
    pub async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let via = &self.message.inbound.provider;
        self.shared.send_once(&self.turn, message, via, self.outbox_key()).await
    }

    /// The bytes of the file this message carries (a photo, a voice note, a document),
    /// fetched through the provider that received it. `InvalidInput` when it carries none,
    /// `Unsupported` when the provider cannot fetch files.
    pub async fn media(&self) -> Result<Bytes> {
        self.shared.fetch_media(&self.message.inbound).await
    }

    /// Reads the data kept for this user (`ctx.user`), an empty object when there is none.
    pub async fn user(&self) -> Result<Value> {
        self.shared.user_data(self.key().as_str()).await
    }

    /// Replaces the data kept for this user.
    pub async fn set_user<T: Serialize>(&self, data: &T) -> Result<()> {
        self.shared.set_user_data(self.key().as_str(), data).await
    }

    /// Starts the flow or conversation `name` with this message once the handler returns.
    pub fn start(&self, name: impl Into<String>) {
        if let Ok(mut s) = self.start.lock() {
            *s = Some(name.into());
        }
    }

    pub(crate) fn take_start(&self) -> Option<String> {
        self.start.lock().ok().and_then(|mut s| s.take())
    }
}
