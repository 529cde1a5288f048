//! Telegram's errors as botmesh's typed errors.

use botmesh_traits::Error;
use teloxide_core::{ApiError, RequestError};

/// Whether `e` is the platform refusing a second poller, or polling while a webhook is set.
pub(crate) fn is_conflict(e: &RequestError) -> bool {
    match e {
        RequestError::Api(ApiError::TerminatedByOtherGetUpdates | ApiError::CantGetUpdates) => true,
        // Telegram's wording for a webhook in the way ("Conflict: can't use getUpdates method
        // while webhook is active; ...") is longer than the one teloxide recognizes.
        RequestError::Api(ApiError::Unknown(text)) => text.starts_with("Conflict"),
        _ => false,
    }
}

/// Whether `e` may go away if the same call is made again shortly, with no risk that the first
/// call went through: the connection could not be made, or Telegram failed on its side (5xx).
/// A timeout is not retried: the message may have been sent.
pub(crate) fn is_transient(e: &RequestError) -> bool {
    match e {
        RequestError::Network(e) => e.is_connect(),
        RequestError::Api(ApiError::Unknown(text)) => {
            ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout"]
                .iter()
                .any(|s| text.contains(s))
        }
        _ => false,
    }
}

/// The typed error for what provider `provider` got from Telegram during `op`, about `chat`.
pub(crate) fn typed(
    provider: &str,
    op: &'static str,
    chat: Option<&str>,
    e: RequestError,
) -> Error {
    let gone = || Error::RecipientGone {
        provider: provider.to_owned(),
        chat: chat.unwrap_or_default().to_owned(),
    };
    let invalid = |reason: String| Error::InvalidInput { reason };
    match e {
        RequestError::RetryAfter(wait) => Error::RateLimited { retry_after: wait.duration() },
        RequestError::Api(ApiError::InvalidToken) => {
            Error::Unauthorized { provider: provider.to_owned() }
        }
        RequestError::Api(
            ApiError::BotBlocked
            | ApiError::ChatNotFound
            | ApiError::UserDeactivated
            | ApiError::BotKicked
            | ApiError::BotKickedFromSupergroup
            | ApiError::BotKickedFromChannel,
        ) => gone(),
        RequestError::Api(ApiError::RequestEntityTooLarge | ApiError::MessageIsTooLong) => {
            Error::TooLarge { what: format!("a request to {op}"), size: 0, limit: 0 }
        }
        RequestError::Api(
            e @ (ApiError::CantParseEntities(_)
            | ApiError::MessageTextIsEmpty
            | ApiError::ButtonDataInvalid),
        ) => invalid(e.to_string()),
        RequestError::MigrateToChatId(to) => {
            invalid(format!("the group became supergroup {}: send to it instead", to.0))
        }
        // Telegram refusing the request as it is: sending it again does not help.
        RequestError::Api(ApiError::Unknown(text))
            if text.starts_with("Bad Request") || text.starts_with("Forbidden") =>
        {
            invalid(text)
        }
        other => Error::provider(provider, op, other),
    }
}

#[cfg(test)]
mod tests {
    use teloxide_core::types::Seconds;

    use super::*;

    #[test]
    fn telegram_errors_become_the_contract_s_typed_errors() {
        let limited =
            typed("tg", "send", Some("1"), RequestError::RetryAfter(Seconds::from_seconds(3)));
        assert!(
            matches!(limited, Error::RateLimited { retry_after } if retry_after.as_secs() == 3)
        );
        let revoked = typed("tg", "send", None, RequestError::Api(ApiError::InvalidToken));
        assert!(matches!(revoked, Error::Unauthorized { .. }));
        let blocked = typed("tg", "send", Some("42"), RequestError::Api(ApiError::BotBlocked));
        assert!(matches!(blocked, Error::RecipientGone { chat, .. } if chat == "42"));
        let long = typed("tg", "send", None, RequestError::Api(ApiError::MessageIsTooLong));
        assert!(matches!(long, Error::TooLarge { .. }));
        let bad = typed("tg", "send", None, RequestError::Api(ApiError::MessageTextIsEmpty));
        assert!(!bad.is_retryable());
        let refused = RequestError::Api(ApiError::Unknown("Bad Request: nope".into()));
        assert!(!typed("tg", "send", None, refused).is_retryable());
        let failing = RequestError::Api(ApiError::Unknown("Internal Server Error".into()));
        assert!(is_transient(&failing));
        assert!(typed("tg", "send", None, failing).is_retryable());
    }
}
