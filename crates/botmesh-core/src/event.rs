//! The typed event stream: one enum, delivered to callbacks, a broadcast channel and `tracing`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_traits::{ChatId, ChatKey, Delivery, LeaseLostReason, MessageId, TransportStatus};
use tokio::sync::broadcast;

use crate::status::Recent;
use crate::{BotError, FallbackReason};

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
    /// Its step ran past `settle` and was cut short; its checkpoint stays for whoever takes
    /// the chat next.
    Suspended,
    /// This replica lost the chat (a refused checkpoint write, a lost turn, or another replica
    /// handled the chat meanwhile); the checkpoint stays for the new owner.
    LeaseLost,
    /// The user sent a cancel word while it waited; its checkpoint is cleared.
    Cancelled,
    /// An interrupting trigger started another conversation while it waited; its checkpoint is
    /// cleared, or set aside to resume later (see `Flow::resume_after_interruption`).
    Interrupted,
}

/// What became of a conversation when its chat moved between replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandoverOutcome {
    /// This replica continued it from the store.
    Continued,
    /// This replica's in-memory copy was stale and was dropped.
    Dropped,
    /// The conversation could not continue; the user was told ([`Fallback::Notify`]).
    ///
    /// [`Fallback::Notify`]: crate::Fallback::Notify
    Notified(FallbackReason),
    /// The conversation could not continue and was entered again from its beginning
    /// ([`Fallback::Restart`]).
    ///
    /// [`Fallback::Restart`]: crate::Fallback::Restart
    Restarted(FallbackReason),
    /// The conversation could not continue; the user's fallback function ran and said whether
    /// it consumed the message.
    Custom {
        /// Why it could not continue.
        reason: FallbackReason,
        /// Whether the function consumed the message.
        consumed: bool,
    },
    /// The conversation could not continue and was let go ([`Fallback::Drop`]); the message
    /// routed as a new one.
    ///
    /// [`Fallback::Drop`]: crate::Fallback::Drop
    Discarded(FallbackReason),
}

impl HandoverOutcome {
    /// The outcome as a short lowercase word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Continued => "continued",
            Self::Dropped => "dropped",
            Self::Notified(_) => "notified",
            Self::Restarted(_) => "restarted",
            Self::Custom { .. } => "custom",
            Self::Discarded(_) => "discarded",
        }
    }

    /// Why the conversation went to the fallback, for the outcomes that are fallbacks.
    pub const fn reason(self) -> Option<FallbackReason> {
        match self {
            Self::Continued | Self::Dropped => None,
            Self::Notified(r)
            | Self::Restarted(r)
            | Self::Discarded(r)
            | Self::Custom { reason: r, .. } => Some(r),
        }
    }
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
            Self::Suspended => "suspended",
            Self::LeaseLost => "lease-lost",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }
}

/// Why a replica follows for a role ([`Event::Follower`]) instead of leading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FollowReason {
    /// Another replica leads it; this one stands by and campaigns.
    Standby,
    /// This replica led it, but its transport stayed closed for `provider_down`: it stepped
    /// down, pauses, and campaigns again.
    ProviderDown,
    /// This replica led it and lost the lease (it expired, or the replica stalled).
    Lost,
    /// This replica is stopping and gave it up.
    Stopping,
}

impl FollowReason {
    /// The reason as a short lowercase word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Standby => "standby",
            Self::ProviderDown => "provider-down",
            Self::Lost => "lost",
            Self::Stopping => "stopping",
        }
    }
}

impl std::fmt::Display for FollowReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition at start that weakens what the bot promises, announced as [`Event::Warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Warning {
    /// The store has no atomic compare-and-set of checkpoints: under coordination a replica
    /// that lost a chat is kept from writing its checkpoint by the local fence only (the turn
    /// check right before each write), not by the store.
    NoAtomicCheckpoints,
}

impl Warning {
    /// The warning as a short lowercase phrase, as it appears in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoAtomicCheckpoints => "no-atomic-checkpoints",
        }
    }
}

/// Something that happened in a bot.
///
/// Every event is also emitted as a `tracing` event on the `botmesh` target. Listen with a
/// callback given to [`BotBuilder::on`](crate::BotBuilder::on) (called in line: keep it
/// short), or subscribe with [`Bot::events`](crate::Bot::events).
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use botmesh_core::{Bot, BotError, Event};
/// # use botmesh_testing::TestProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let provider = TestProvider::new();
/// let failures = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::clone(&failures);
/// let bot = Bot::builder()
///     .provider(provider.clone())
///     .on_message(|_ctx| async move { Err::<(), _>(BotError::NotRunning) })
///     .on(move |event| {
///         if let Event::Error { message: Some(id), error, .. } = event {
///             seen.lock().unwrap().push((id.to_string(), error.label()));
///         }
///     })
///     .build()?;
/// bot.start().await?;
/// let id = provider.say("chat-1", "hi");
/// provider.settled(&bot).await;
/// assert_eq!(failures.lock().unwrap()[0].0, id.to_string());
/// # bot.stop().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The bot started.
    Started,
    /// Something about the bot's setup weakens its promises; emitted at start.
    Warning(Warning),
    /// The bot stopped.
    Stopped,
    /// The provider's transport opened or closed.
    Transport {
        /// The provider.
        provider: String,
        /// Its new status.
        status: TransportStatus,
    },
    /// A message the bot sent was delivered, read, or failed, as its platform reports.
    Delivery {
        /// The provider that sent it.
        provider: String,
        /// The receipt.
        delivery: Delivery,
    },
    /// A message was dropped because this process already received its id.
    Duplicate {
        /// The chat key.
        key: ChatKey,
        /// The message id.
        id: MessageId,
    },
    /// A journaled message another replica left (it died, stalled, or handed the message
    /// back) was taken over here, to be handled in its place in the chat's order.
    TakenOver {
        /// The chat key.
        key: ChatKey,
        /// The message id.
        id: MessageId,
        /// The incarnation it was taken from (`released` for a hand-back).
        from: String,
    },
    /// A send was skipped: the outbox says an earlier run of the same step made it.
    SendSkipped {
        /// The chat.
        chat: ChatId,
        /// The outbox key.
        outbox: String,
    },
    /// A message was handled: a conversation took it or the handlers ran.
    Handled {
        /// The chat key.
        key: ChatKey,
        /// The message id.
        id: MessageId,
    },
    /// The chat's turn was given back after its messages ran: they are acknowledged (with
    /// durability) and, under coordination, the chat's next message may now run here or on
    /// another replica. Follows the [`Event::Handled`] of each message that ran under the turn.
    Finished {
        /// The chat key.
        key: ChatKey,
        /// The fence of the turn given back; `None` without coordination.
        fence: Option<u64>,
    },
    /// The bot sent a message.
    Sent {
        /// The chat.
        chat: ChatId,
    },
    /// A platform throttled a send; it goes out again after `retry_after`.
    RateLimited {
        /// The provider whose platform asked to wait.
        provider: String,
        /// How long it asked to wait.
        retry_after: Duration,
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
    /// This replica was elected for `name` (`provider:<id>` for an exclusive transport).
    Leader {
        /// The role.
        name: String,
        /// Its fence.
        fence: u64,
    },
    /// This replica stands by for `name`, or stepped down from it.
    Follower {
        /// The role.
        name: String,
        /// Why.
        reason: FollowReason,
    },
    /// This replica lost its hold on a chat. (A leadership it loses is told by
    /// [`Event::Follower`] with [`FollowReason::Lost`].)
    LeaseLost {
        /// The chat key.
        key: ChatKey,
        /// Why.
        reason: LeaseLostReason,
    },
    /// A conversation moved between replicas.
    Handover {
        /// The chat key.
        key: ChatKey,
        /// The flow or conversation.
        name: String,
        /// What became of it here.
        outcome: HandoverOutcome,
    },
    /// Something failed. `key` is the chat, and `message` the message being handled, when the
    /// failure belongs to one.
    Error {
        /// The chat.
        key: Option<ChatKey>,
        /// The message being handled when it failed.
        message: Option<MessageId>,
        /// What failed.
        error: Arc<BotError>,
    },
}

/// A callback registered with [`BotBuilder::on`](crate::BotBuilder::on).
pub(crate) type Listener = Arc<dyn Fn(&Event) + Send + Sync>;

/// How many notable events a replica's status keeps.
const RECENT: usize = 32;

/// Fans events out to callbacks (the metrics' first: see `BotBuilder::build`), broadcast
/// subscribers and `tracing`, and keeps the latest notable ones for the replica's status.
pub(crate) struct EventBus {
    /// Fixed when the bot is built: read on every event without a lock.
    listeners: Box<[Listener]>,
    tx: broadcast::Sender<Event>,
    recent: Mutex<VecDeque<Recent>>,
}

impl EventBus {
    pub(crate) fn new(listeners: Vec<Listener>, capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        let recent = Mutex::new(VecDeque::with_capacity(RECENT));
        Self { listeners: listeners.into_boxed_slice(), tx, recent }
    }

    /// The latest notable events, newest first.
    pub(crate) fn recent(&self) -> Vec<Recent> {
        self.recent.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    pub(crate) fn emit(&self, event: Event) {
        trace_event(&event);
        if let Some(recent) = recent_of(&event)
            && let Ok(mut kept) = self.recent.lock()
        {
            if kept.len() == RECENT {
                kept.pop_back();
            }
            kept.push_front(recent);
        }
        for l in &self.listeners {
            // A panicking listener must not take down the task that emits: a chat worker, a
            // heartbeat loop.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(&event))).is_err() {
                tracing::error!(target: "botmesh", "an event listener panicked");
            }
        }
        // Without subscribers the event comes back, and is dropped; lagging subscribers lose
        // old events, the broadcast contract. One lock either way, taken by the send itself.
        let _ = self.tx.send(event);
    }

    pub(crate) fn error(&self, key: Option<&ChatKey>, error: BotError) {
        self.emit(Event::Error { key: key.cloned(), message: None, error: Arc::new(error) });
    }

    /// An error that belongs to message `message` of chat `key`.
    pub(crate) fn message_error(&self, key: &ChatKey, message: &MessageId, error: BotError) {
        let (key, message) = (Some(key.clone()), Some(message.clone()));
        self.emit(Event::Error { key, message, error: Arc::new(error) });
    }
}

/// A notable event as a status shows it: no content, errors by label.
fn recent_of(event: &Event) -> Option<Recent> {
    let recent = |kind: &str, chat: Option<&ChatKey>, detail: String| {
        Some(Recent {
            at_ms: crate::clock::now_ms(),
            kind: kind.to_owned(),
            chat: chat.map(|c| c.as_str().to_owned()),
            detail,
        })
    };
    match event {
        Event::Started => recent("started", None, String::new()),
        Event::Stopped => recent("stopped", None, String::new()),
        Event::Warning(w) => recent("warning", None, w.as_str().to_owned()),
        Event::Transport { provider, status } => {
            recent("transport", None, format!("{provider} {}", status_word(*status)))
        }
        Event::Leader { name, fence } => recent("leader", None, format!("{name} fence {fence}")),
        Event::Follower { name, reason } => {
            recent("follower", None, format!("{name} {}", reason.as_str()))
        }
        Event::TakenOver { key, from, .. } => recent("takeover", Some(key), format!("from {from}")),
        Event::LeaseLost { key, reason } => {
            recent("lease_lost", Some(key), reason.as_str().to_owned())
        }
        Event::Handover { key, name, outcome } => {
            recent("handoff", Some(key), format!("{name} {}", outcome.as_str()))
        }
        Event::Error { key, error, .. } => recent("error", key.as_ref(), error.label().to_owned()),
        _ => None,
    }
}

fn status_word(status: TransportStatus) -> &'static str {
    match status {
        TransportStatus::Open => "open",
        _ => "closed",
    }
}

fn trace_event(event: &Event) {
    match event {
        Event::Error { key, error, .. } => {
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
        Event::Leader { name, fence } => tracing::info!(target: "botmesh", name, fence, "leader"),
        Event::Follower { name, reason } => {
            tracing::info!(target: "botmesh", name, reason = reason.as_str(), "follower");
        }
        Event::LeaseLost { key, reason } => {
            tracing::warn!(target: "botmesh", key = %key, reason = reason.as_str(), "lease lost");
        }
        Event::Handover { key, name, outcome } => {
            let reason = outcome.reason().map(FallbackReason::as_str);
            tracing::info!(target: "botmesh", key = %key, name, outcome = outcome.as_str(), reason, "handover");
        }
        Event::Started => tracing::info!(target: "botmesh", "bot started"),
        Event::Warning(warning) => {
            tracing::warn!(target: "botmesh", warning = warning.as_str(), "weaker guarantees");
        }
        Event::Stopped => tracing::info!(target: "botmesh", "bot stopped"),
        other => tracing::trace!(target: "botmesh", event = ?other),
    }
}
