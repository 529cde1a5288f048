//! The context a message handler runs with.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use botmesh_traits::{Bytes, ChatId, ChatKey, Outbound, OutboundContent, SendReceipt};
use serde::Serialize;
use serde_json::Value;

use crate::coordination::TurnSlot;
use crate::shared::{OutboxKey, Shared};
use crate::{Message, Result};

/// What a message handler gets: the message, and ways to answer it.
///
/// Cheap to clone. A conversation step gets a [`ConvCtx`](crate::ConvCtx), which answers the
/// same questions with the same names and types: `key`, `chat`, `message`, `body`, `lang`,
/// `text`, `fence`, `reply`, `send`, `send_message`, `media`, `user` and `set_user`.
///
/// ```
/// use botmesh_core::{Bot, BotError, OutboundContent};
/// # use botmesh_testing::TestProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let provider = TestProvider::new();
/// let bot = Bot::builder()
///     .provider(provider.clone())
///     .on_message(|ctx| async move {
///         let mut user = ctx.user().await?;
///         let visits = user["visits"].as_u64().unwrap_or(0) + 1;
///         user["visits"] = visits.into();
///         ctx.set_user(&user).await?;
///         ctx.reply(format!("visit {visits} from {}", ctx.chat().as_str())).await?;
///         ctx.send(OutboundContent::Location { latitude: 41.4, longitude: 2.2, name: None })
///             .await?;
///         Ok::<_, BotError>(())
///     })
///     .build()?;
/// bot.start().await?;
/// provider.say("chat-1", "hi");
/// provider.settled(&bot).await;
/// assert_eq!(provider.texts_to("chat-1"), ["visit 1 from chat-1"]);
/// # bot.stop().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Ctx {
    shared: Arc<Shared>,
    turn: Arc<TurnSlot>,
    message: Arc<Message>,
    key: ChatKey,
    start: Arc<Mutex<Option<String>>>,
    /// With durability: the outbox keys of this handler's sends.
    outbox: Option<Arc<OutboxKeys>>,
}

/// The outbox keys of one handler's sends for one message.
struct OutboxKeys {
    /// What every key starts with: the chat, the message's journal id, the handler.
    prefix: String,
    /// The sends made so far, which number the next key.
    sent: AtomicU32,
    /// The message is handled for the first time (see [`TurnSlot::is_fresh`]).
    fresh: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("message", &self.message).finish_non_exhaustive()
    }
}

impl Ctx {
    /// A context for handler number `handler` of `message`, of chat `key`, or for the
    /// hand-over fallback function when `None`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        turn: Arc<TurnSlot>,
        key: ChatKey,
        message: impl Into<Arc<Message>>,
        handler: Option<usize>,
    ) -> Self {
        let message = message.into();
        let outbox = shared.durability.is_some().then(|| {
            // `{key}|{journal id}|{slot}`, written once into a string of its final size; the
            // slot is the handler's index (`h3`), or `fallback`.
            let inbound = &message.inbound;
            let id_len = crate::durable::journal_id_len(inbound);
            let mut prefix = String::with_capacity(key.as_str().len() + id_len + 24);
            prefix.push_str(key.as_str());
            prefix.push('|');
            let id_at = prefix.len();
            crate::durable::push_journal_id(&mut prefix, inbound);
            let fresh = turn.is_fresh(&prefix[id_at..]);
            match handler {
                // Writing into a string cannot fail.
                Some(h) => {
                    let _ = write!(prefix, "|h{h}");
                }
                None => prefix.push_str("|fallback"),
            }
            Arc::new(OutboxKeys { fresh, prefix, sent: AtomicU32::new(0) })
        });
        Self { shared, turn, key, message, start: Arc::default(), outbox }
    }

    /// The outbox key of the next send, with durability.
    fn outbox_key(&self) -> Option<OutboxKey> {
        self.outbox.as_ref().map(|o| {
            // Room for `|{n}` and the suffix of its mark (see `mark_of` in `shared.rs`).
            let mut key = String::with_capacity(o.prefix.len() + 16);
            key.push_str(&o.prefix);
            // Writing into a string cannot fail.
            let _ = write!(key, "|{}", o.sent.fetch_add(1, Ordering::SeqCst));
            OutboxKey { key, fresh: o.fresh, handler: true }
        })
    }

    /// The message, after the `before_message` hooks. [`ConvCtx::message`](crate::ConvCtx::message)
    /// answers the same in a conversation.
    pub fn message(&self) -> Arc<Message> {
        Arc::clone(&self.message)
    }

    /// The message's body (see [`Message::body`]).
    pub fn body(&self) -> String {
        self.message.body.clone()
    }

    /// The ordering key of the chat (see [`ChatKey`]).
    pub fn key(&self) -> &ChatKey {
        &self.key
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        self.message.chat()
    }

    /// The message's language, if known.
    pub fn lang(&self) -> Option<String> {
        self.message.lang.clone()
    }

    /// The fence of the chat's turn this handler runs under: it grows with every grant of the
    /// chat's turn, so a resource of your own can refuse a write carrying a fence lower than
    /// one it has seen. `None` without coordination.
    pub fn fence(&self) -> Option<u64> {
        self.turn.fence()
    }

    /// A built-in or overridden text in the message's language.
    pub fn text<'a>(&'a self, key: &'a str) -> &'a str {
        self.shared.def.texts.get(self.message.lang.as_deref(), key)
    }

    /// Sends a text to the chat the message came from.
    ///
    /// With durability, the send is marked in the outbox once it went out, so that the same
    /// message handled again (replayed after a crash) does not send it twice; the receipt of a
    /// skipped send has no id. A send's mark is named after its place among the handler's
    /// sends, taken when it is called (not when it is first awaited).
    pub fn reply(
        &self,
        text: impl Into<String>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + '_ {
        self.send(text.into())
    }

    /// Sends any content to the chat the message came from, fenced by the chat's turn and
    /// deduplicated like [`Ctx::reply`]. A `&str` or a `String` is sent as a text.
    pub fn send(
        &self,
        content: impl Into<OutboundContent>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + '_ {
        let message = Outbound::new(self.chat().clone(), content.into());
        self.send_outbound(Cow::Owned(message))
    }

    /// Sends a whole message: to another chat, through another provider, or quoting a message.
    /// Fenced by this chat's turn and deduplicated like [`Ctx::reply`].
    pub fn send_message<'a>(
        &'a self,
        message: &'a Outbound,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + 'a {
        self.send_outbound(Cow::Borrowed(message))
    }

    /// Sends `message`, owned when the context built it.
    fn send_outbound<'a>(
        &'a self,
        message: Cow<'a, Outbound>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + 'a {
        let via = &self.message.inbound.provider;
        self.shared.send_once(&self.turn, message, via, self.outbox_key())
    }

    /// The bytes of the file this message carries (a photo, a voice note, a document),
    /// fetched through the provider that received it. `InvalidInput` when it carries none,
    /// `Unsupported` when the provider cannot fetch files.
    pub async fn media(&self) -> Result<Bytes> {
        self.shared.fetch_media(&self.message.inbound).await
    }

    /// Reads the data kept for this user (`ctx.user`), an empty object when there is none.
    pub async fn user(&self) -> Result<Value> {
        self.shared.user_data(self.key.as_str()).await
    }

    /// Replaces the data kept for this user.
    pub async fn set_user<T: Serialize>(&self, data: &T) -> Result<()> {
        self.shared.set_user_data(self.key.as_str(), data).await
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
