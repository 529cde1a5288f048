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

/// Whether `e` may go away if the same call is made again shortly: the network, or the
/// platform failing on its side (teloxide reports 5xx replies as unknown API errors or bodies
/// that do not parse).
pub(crate) fn is_transient(e: &RequestError) -> bool {
    matches!(
        e,
        RequestError::Network(_)
            | RequestError::Io(_)
            | RequestError::InvalidJson { .. }
            | RequestError::Api(ApiError::Unknown(_))
    )
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
        RequestError::Api(ApiError::RequestEntityTooLarge) => {
            Error::TooLarge { what: format!("a request to {op}"), size: 0, limit: 0 }
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
        let other = typed("tg", "send", None, RequestError::Api(ApiError::Unknown("x".into())));
        assert!(other.is_retryable());
    }
}
