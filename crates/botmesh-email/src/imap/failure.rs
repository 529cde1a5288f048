//! Why an IMAP command failed, and the botmesh error it is reported as: a server's refusal
//! (`NO`, `BAD`), no answer in time, or a connection that ended. Each is an
//! [`Error::Provider`], which the session retries with backoff: none of them is the bot's or
//! the mail's fault.

use std::fmt;
use std::time::Duration;

use async_imap::error::Error as ImapError;
use async_imap::imap_proto::{Outcome, Status};
use botmesh_traits::Error;

/// The IMAP commands the session sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    Select,
    Capability,
    Search,
    Fetch,
    Store,
    Move,
    Noop,
    Idle,
    Done,
}

impl Command {
    /// The command as the server reads it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Select => "SELECT",
            Self::Capability => "CAPABILITY",
            Self::Search => "UID SEARCH",
            Self::Fetch => "UID FETCH",
            Self::Store => "UID STORE",
            Self::Move => "UID MOVE",
            Self::Noop => "NOOP",
            Self::Idle => "IDLE",
            Self::Done => "DONE",
        }
    }

    /// What it does, as the operation of [`Error::Provider`] ("failed to search the
    /// mailbox").
    fn op(self) -> &'static str {
        match self {
            Self::Select => "select the mailbox",
            Self::Capability => "read the IMAP server's capabilities",
            Self::Search => "search the mailbox",
            Self::Fetch => "fetch a mail",
            Self::Store => "flag a mail \\Seen",
            Self::Move => "move a mail",
            Self::Noop => "ask the IMAP server for new mail",
            Self::Idle => "wait in IDLE",
            Self::Done => "leave IDLE",
        }
    }
}

/// Why an IMAP command failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered `NO` or `BAD`: it refused the command (the connection works).
    Refused { command: Command, status: &'static str, text: String },
    /// The server did not answer within `limit`: it, or the network, stopped answering.
    TimedOut { command: Command, limit: Duration },
    /// The connection ended or failed, or the server's answer could not be read.
    Lost { command: Command, source: ImapError },
    /// The command was not sent: a name in it cannot be written in IMAP (a line break).
    Unsent { command: Command, reason: String },
}

/// The longest text of the server's kept in an error.
const MAX_TEXT: usize = 200;

/// The server's words, short and on one line.
fn tidy(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(MAX_TEXT).collect()
}

impl Failure {
    /// The failure a tagged answer other than `OK` to `command` means.
    pub(crate) fn answer(command: Command, status: &Status, outcome: &Outcome<'_>) -> Self {
        let status = match status {
            Status::No => "NO",
            Status::Bad => "BAD",
            Status::Ok => "OK",
            Status::PreAuth => "PREAUTH",
            Status::Bye => "BYE",
        };
        let mut text = String::new();
        if let Some(code) = &outcome.code {
            text.push_str(&format!("[{code:?}] "));
        }
        text.push_str(outcome.information.as_deref().unwrap_or_default());
        Self::Refused { command, status, text: tidy(&text) }
    }

    /// The connection failed during `command`.
    pub(crate) fn lost(command: Command, source: impl Into<ImapError>) -> Self {
        Self::Lost { command, source: source.into() }
    }

    /// The command that failed.
    pub(crate) fn command(&self) -> Command {
        match self {
            Self::Refused { command, .. }
            | Self::TimedOut { command, .. }
            | Self::Lost { command, .. }
            | Self::Unsent { command, .. } => *command,
        }
    }

    /// The failure an error of one of `async-imap`'s own calls for `command` means: its
    /// `NO` and `BAD` are refusals, a name it would not send is [`Failure::Unsent`].
    pub(crate) fn checked(command: Command, e: ImapError) -> Self {
        match e {
            ImapError::No(text) => Self::Refused { command, status: "NO", text: tidy(&text) },
            ImapError::Bad(text) => Self::Refused { command, status: "BAD", text: tidy(&text) },
            ImapError::Validate(e) => Self::Unsent { command, reason: e.to_string() },
            e => Self::lost(command, e),
        }
    }

    /// Whether the server refused the command, the connection still working.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }

    /// Whether the connection is still usable after this failure: the command was refused
    /// or never sent, rather than left unanswered or cut.
    pub(crate) fn connection_works(&self) -> bool {
        matches!(self, Self::Refused { .. } | Self::Unsent { .. })
    }

    /// This failure as a botmesh error of `provider`: an [`Error::Provider`], retryable.
    pub(crate) fn into_error(self, provider: &str) -> Error {
        Error::provider(provider, self.op(), self)
    }

    /// What the failed command does, as the operation of [`Error::Provider`].
    pub(crate) fn op(&self) -> &'static str {
        self.command().op()
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { command, status, text } => {
                write!(f, "the IMAP server answered {} with {status}: {text}", command.name())
            }
            Self::TimedOut { command, limit } => {
                write!(f, "the IMAP server did not answer {} within {limit:?}", command.name())
            }
            Self::Lost { command, source } => {
                write!(f, "the IMAP connection failed during {}: {source}", command.name())
            }
            Self::Unsent { command, reason } => write!(f, "{} not sent: {reason}", command.name()),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Lost { source, .. } => Some(source),
            Self::Refused { .. } | Self::TimedOut { .. } | Self::Unsent { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use botmesh_traits::{ErrorKind, Recovery};

    use super::*;

    #[test]
    fn a_refusal_is_a_retryable_provider_error_naming_the_command_and_the_servers_words() {
        let outcome =
            Outcome { code: None, information: Some(Cow::Borrowed("[UNAVAILABLE] try\r\nlater")) };
        let failure = Failure::answer(Command::Search, &Status::No, &outcome);
        assert!(failure.is_refusal());
        assert_eq!(
            failure.to_string(),
            "the IMAP server answered UID SEARCH with NO: [UNAVAILABLE] try  later"
        );
        let error = failure.into_error("email");
        assert_eq!(error.kind(), ErrorKind::Provider);
        assert_eq!(error.recovery(), Recovery::Retry);
        assert_eq!(error.to_string(), "provider email failed to search the mailbox");
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("the IMAP server answered UID SEARCH with NO: [UNAVAILABLE] try  later")
        );

        let long = "x".repeat(1000);
        let outcome = Outcome { code: None, information: Some(Cow::Owned(long)) };
        let Failure::Refused { text, status, .. } =
            Failure::answer(Command::Store, &Status::Bad, &outcome)
        else {
            unreachable!("an answer is a refusal")
        };
        assert_eq!((status, text.len()), ("BAD", MAX_TEXT));
    }

    #[test]
    fn a_timeout_or_a_lost_connection_is_retryable_too() {
        let timed_out = Failure::TimedOut { command: Command::Done, limit: Duration::from_secs(1) };
        assert!(!timed_out.is_refusal());
        assert_eq!(timed_out.into_error("email").recovery(), Recovery::Retry);
        let lost = Failure::lost(Command::Fetch, ImapError::ConnectionLost);
        assert_eq!(lost.into_error("email").recovery(), Recovery::Retry);
    }
}
