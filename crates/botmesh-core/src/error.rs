//! The errors of the bot runtime.

use std::time::Duration;

use botmesh_traits::{BoxError, ChatKey, Error, ErrorKind, MessageId, Recovery};

/// A `Result` whose error defaults to [`BotError`].
pub type Result<T, E = BotError> = std::result::Result<T, E>;

/// Everything that can go wrong while a bot runs.
///
/// Errors raised while handling a message are also delivered as
/// [`Event::Error`](crate::Event::Error), with the chat they belong to.
///
/// A backend's failure is [`BotError::Contract`]; [`BotError::kind`] classifies it without a
/// match, and [`BotError::recovery`] says whether trying again may help:
///
/// ```
/// use botmesh_core::{BotError, Error, ErrorKind};
///
/// let e = BotError::from(Error::ProviderNotLeader { provider: "telegram".into() });
/// assert!(matches!(&e, BotError::Contract(Error::ProviderNotLeader { .. })));
/// assert_eq!(e.kind(), Some(ErrorKind::ProviderNotLeader));
/// assert!(BotError::ConversationClosed.kind().is_none());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BotError {
    /// A provider, store or coordinator failed; see [`Error::kind`].
    #[error(transparent)]
    Contract(#[from] Error),
    /// With durability: a message was handled `attempts` times and each time its effect could
    /// not be stored (its step was cut short, its turn lost); it is acknowledged and dropped.
    #[error("gave up on message {id} of {key} after {attempts} attempts")]
    GaveUp {
        /// The chat.
        key: ChatKey,
        /// The message id.
        id: MessageId,
        /// How many times it was handled.
        attempts: u32,
    },
    /// A message was still queued when the bot stopped and ran out of time to handle it;
    /// without durability nothing keeps it for another replica.
    #[error("message {id} of {key} was not handled: the bot stopped")]
    Unhandled {
        /// The chat.
        key: ChatKey,
        /// The message id.
        id: MessageId,
    },
    /// A handler, hook or conversation returned an error. `source` is the user's own error,
    /// which can be downcast.
    #[error("handler failed in {key}")]
    Handler {
        /// The chat the handler ran for.
        key: ChatKey,
        /// The user's error.
        #[source]
        source: BoxError,
    },
    /// A handler, hook or conversation panicked. The chat goes on with its next message.
    #[error("handler panicked in {key}: {message}")]
    Panic {
        /// The chat the handler ran for.
        key: ChatKey,
        /// The panic payload, when it was text.
        message: String,
    },
    /// A value put into a flow's state or a user's data does not serialize to JSON.
    #[error("state value {field:?} of {name} is not plain JSON")]
    StateNotJson {
        /// The flow or conversation.
        name: String,
        /// The state field.
        field: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored checkpoint could not be read; the conversation was reset.
    #[error("checkpoint of {key} is corrupt; the conversation was reset")]
    CorruptCheckpoint {
        /// The chat.
        key: ChatKey,
        /// Why it could not be read.
        #[source]
        source: BoxError,
    },
    /// A `do` step resumed from its checkpoint asked something else than the question it was
    /// parked on, or ended before it used up the answers it had recorded: its code changed
    /// since. The step runs again from its start, asking its first question.
    #[error(
        "step {step} of flow {name:?} went another way than the run it was resumed from; it runs again from its start"
    )]
    ReplayDiverged {
        /// The flow.
        name: String,
        /// The step's index.
        step: usize,
    },
    /// A flow or conversation name that was never registered.
    #[error("no flow or conversation named {name:?}")]
    UnknownConversation {
        /// The name asked for.
        name: String,
    },
    /// A conversation's wait ran into its idle watchdog. Returned by waits, so that
    /// conversation code can nudge the user; propagating it ends the conversation quietly.
    #[error("no answer for {after:?}")]
    Idle {
        /// The watchdog's period.
        after: Duration,
    },
    /// The conversation was ended while waiting (a timeout, a new conversation, a stop).
    #[error("the conversation ended while waiting")]
    ConversationClosed,
    /// The bot was built with a wrong configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A scheduled job failed or panicked.
    #[error("scheduled job {task} failed")]
    Job {
        /// The durable task's id, or `job` for a plain job.
        task: String,
        /// The job's error, or its panic message.
        #[source]
        source: BoxError,
    },
    /// The bot is not running.
    #[error("the bot is not running")]
    NotRunning,
}

impl BotError {
    /// The contract error inside, if this is one.
    pub fn as_contract(&self) -> Option<&Error> {
        match self {
            Self::Contract(e) => Some(e),
            _ => None,
        }
    }

    /// A short name of what failed, in snake case, as logs, metric labels and the status page
    /// show it: the [`ErrorKind`] of a contract error, else the variant (`handler`, `panic`,
    /// `gave_up`, ...). It never carries a message's content.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Contract(e) => e.kind().as_str(),
            Self::GaveUp { .. } => "gave_up",
            Self::Unhandled { .. } => "unhandled",
            Self::Handler { .. } => "handler",
            Self::Panic { .. } => "panic",
            Self::StateNotJson { .. } => "state_not_json",
            Self::CorruptCheckpoint { .. } => "corrupt_checkpoint",
            Self::ReplayDiverged { .. } => "replay_diverged",
            Self::UnknownConversation { .. } => "unknown_conversation",
            Self::Idle { .. } => "idle",
            Self::ConversationClosed => "conversation_closed",
            Self::Config(_) => "config",
            Self::Job { .. } => "job",
            Self::NotRunning => "not_running",
        }
    }

    /// The class of the provider, store or coordinator error behind this one: a
    /// [`Contract`](Self::Contract) error, or one a handler, hook or conversation returned
    /// (as a [`BotError`] or an [`Error`]). `None` when no backend or transport is to blame.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Contract(e) => Some(e.kind()),
            Self::Handler { source, .. } => source_kind(source),
            _ => None,
        }
    }

    /// What the runtime does about this error when it ends a handler or a step: the
    /// [`Recovery`] of its [`kind`](Self::kind), and [`Recovery::Fail`] for an error of the
    /// bot's own code.
    pub fn recovery(&self) -> Recovery {
        self.kind().map_or(Recovery::Fail, ErrorKind::recovery)
    }

    /// Whether this is the idle watchdog firing.
    pub fn is_idle(&self) -> bool {
        matches!(self, Self::Idle { .. })
    }
}

/// The class of the contract error a handler returned, if it returned one.
fn source_kind(source: &BoxError) -> Option<ErrorKind> {
    if let Some(e) = source.downcast_ref::<BotError>() {
        return e.kind();
    }
    source.downcast_ref::<Error>().map(Error::kind)
}

/// A configuration the bot builder refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No provider was given.
    #[error("a bot needs a provider")]
    MissingProvider,
    /// Two providers share an id.
    #[error("two providers have the id {id:?}")]
    DuplicateProvider {
        /// The id.
        id: String,
    },
    /// Two flows or conversations share a name.
    #[error("two flows or conversations are named {name:?}")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// Durability was asked for on a store without the inbox journal and the outbox.
    #[error("durability needs a store with the inbox journal and the outbox")]
    NoJournal,
    /// A durable task on a store shared by several replicas that cannot claim an occurrence
    /// atomically (neither task records nor compare-and-set of checkpoints): an occurrence
    /// could run twice.
    #[error(
        "durable task {task:?} needs a store with atomic checkpoint writes when the store is shared"
    )]
    DurableTaskNeedsAtomicStore {
        /// The task's id.
        task: String,
    },
    /// A flow has no steps.
    #[error("flow {name:?} has no steps")]
    EmptyFlow {
        /// The flow.
        name: String,
    },
    /// A cron expression does not parse.
    #[error("invalid schedule {expression:?}: {reason}")]
    InvalidSchedule {
        /// The expression.
        expression: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A trigger's regular expression does not compile.
    #[error("invalid trigger pattern {pattern:?}")]
    InvalidPattern {
        /// The pattern.
        pattern: String,
        /// The compiler's error.
        #[source]
        source: regex::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(source: BoxError) -> BotError {
        BotError::Handler { key: ChatKey::from("chat:1"), source }
    }

    #[test]
    fn a_handler_s_error_is_classified_by_the_contract_error_inside_it() {
        let store = Error::store("get_chat", std::io::Error::other("reset"));
        assert_eq!(handler(Box::new(store)).recovery(), Recovery::Retry);
        let not_leader = BotError::from(Error::ProviderNotLeader { provider: "wa".into() });
        let e = handler(Box::new(not_leader));
        assert_eq!(e.kind(), Some(ErrorKind::ProviderNotLeader));
        assert_eq!(e.recovery(), Recovery::HandBack);
    }

    #[test]
    fn an_error_of_the_bot_s_own_code_fails() {
        let e = handler(Box::new(std::io::Error::other("bad order")));
        assert_eq!(e.kind(), None);
        assert_eq!(e.recovery(), Recovery::Fail);
        assert_eq!(BotError::NotRunning.recovery(), Recovery::Fail);
    }
}
