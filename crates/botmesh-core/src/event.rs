//! The typed event stream: one enum, delivered to callbacks, a broadcast channel and `tracing`.

use std::sync::{Arc, RwLock};

use botmesh_traits::{ChatId, ChatKey, MessageId, TransportStatus};
use tokio::sync::broadcast;

use crate::BotError;

/// Why a conversation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// It ran to its end.
    Completed,
    /// The user did not answer within the conversation's timeout.
    Timeout,
    /// Its code let the idle watchdog's error end it.
    Idle,
    /// Its code failed or panicked.
    Failed,
    /// Another conversation replaced it (a `goto`, or a handler starting one).
    Replaced,
    /// The bot stopped while it was waiting; a persistent checkpoint stays.
    Stopped,
    /// Its checkpoint was corrupt.
    Reset,
}

impl EndReason {
    /// The reason as a short lowercase word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Timeout => "timeout",
            Self::Idle => "idle",
            Self::Failed => "failed",
            Self::Replaced => "replaced",
            Self::Stopped => "stopped",
            Self::Reset => "reset",
        }
    }
}

/// Something that happened in a bot.
///
/// Every event is also emitted as a `tracing` event on the `botmesh` target.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The bot started.
    Started,
    /// The bot stopped.
    Stopped,
    /// The provider's transport opened or closed.
    Transport {
        /// The provider.
        provider: String,
        /// Its new status.
        status: TransportStatus,
    },
    /// A message was dropped because this process already received its id.
    Duplicate {
        /// The chat key.
        key: ChatKey,
        /// The message id.
        id: MessageId,
    },
    /// A message was handled: a conversation took it or the handlers ran.
    Handled {
        /// The chat key.
        key: ChatKey,
        /// The message id.
        id: MessageId,
    },
    /// The bot sent a message.
    Sent {
        /// The chat.
        chat: ChatId,
    },
    /// A flow or conversation started (or resumed from its checkpoint).
    ConversationStarted {
        /// The chat key.
        key: ChatKey,
        /// The flow or conversation.
        name: String,
        /// Whether it continued from a stored checkpoint.
        resumed: bool,
    },
    /// A flow entered a step.
    Step {
        /// The chat key.
        key: ChatKey,
        /// The flow.
        flow: String,
        /// The step's index.
        index: usize,
        /// The step's name.
        step: String,
    },
    /// A flow or conversation ended.
    ConversationEnded {
        /// The chat key.
        key: ChatKey,
        /// The flow or conversation.
        name: String,
        /// Why.
        reason: EndReason,
    },
    /// Something failed. `key` is the chat, when the failure belongs to one.
    Error {
        /// The chat.
        key: Option<ChatKey>,
        /// What failed.
        error: Arc<BotError>,
    },
}

/// A callback registered with [`BotBuilder::on`](crate::BotBuilder::on).
pub(crate) type Listener = Arc<dyn Fn(&Event) + Send + Sync>;

/// Fans events out to callbacks, broadcast subscribers and `tracing`.
pub(crate) struct EventBus {
    listeners: RwLock<Vec<Listener>>,
    tx: broadcast::Sender<Event>,
}

impl EventBus {
    pub(crate) fn new(listeners: Vec<Listener>, capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self { listeners: RwLock::new(listeners), tx }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    pub(crate) fn emit(&self, event: Event) {
        trace_event(&event);
        if let Ok(listeners) = self.listeners.read() {
            for l in listeners.iter() {
                l(&event);
            }
        }
        if self.tx.receiver_count() > 0 {
            // Lagging subscribers lose old events; that is the broadcast contract.
            let _ = self.tx.send(event);
        }
    }

    pub(crate) fn error(&self, key: Option<&ChatKey>, error: BotError) {
        self.emit(Event::Error { key: key.cloned(), error: Arc::new(error) });
    }
}

fn trace_event(event: &Event) {
    match event {
        Event::Error { key, error } => {
            let key = key.as_ref().map(ChatKey::as_str);
            tracing::warn!(target: "botmesh", key, error = %error, source = ?std::error::Error::source(&**error), "error");
        }
        Event::ConversationEnded { key, name, reason } => {
            tracing::debug!(target: "botmesh", key = %key, name, reason = reason.as_str(), "conversation ended");
        }
        Event::ConversationStarted { key, name, resumed } => {
            tracing::debug!(target: "botmesh", key = %key, name, resumed, "conversation started");
        }
        Event::Transport { provider, status } => {
            tracing::info!(target: "botmesh", provider, status = ?status, "transport");
        }
        Event::Started => tracing::info!(target: "botmesh", "bot started"),
        Event::Stopped => tracing::info!(target: "botmesh", "bot stopped"),
        other => tracing::trace!(target: "botmesh", event = ?other),
    }
}
