//! Discord's errors as botmesh's typed errors.

use std::time::Duration;

use botmesh_traits::Error;
use serenity::http::HttpError;
use serenity::model::gateway::GatewayIntents;

/// What Discord answered a call with, when it was not a success.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    /// Discord's JSON error code (`50007`, `10003`...), `0` when the body has none.
    pub(crate) code: u64,
    pub(crate) message: String,
    /// A `429`'s wait: the `Retry-After` header, else the body's `retry_after`.
    pub(crate) retry_after: Option<Duration>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "discord answered {} (code {}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    /// Reads a refusal from a status, its `Retry-After` header and its JSON body.
    pub(crate) fn read(status: u16, retry_after_header: Option<&str>, body: &[u8]) -> Self {
        let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let seconds = retry_after_header
            .and_then(|h| h.trim().parse::<f64>().ok())
            .or_else(|| json["retry_after"].as_f64())
            .filter(|s| s.is_finite() && *s >= 0.0);
        Self {
            status,
            code: json["code"].as_u64().unwrap_or(0),
            message: json["message"].as_str().unwrap_or_default().to_owned(),
            // At most an hour: a wait longer than that is not one to sleep through.
            retry_after: seconds.map(|s| Duration::from_secs_f64(s.min(3600.0))),
        }
    }

    /// The typed error for provider `provider` sending to `chat`.
    pub(crate) fn typed(self, provider: &str, op: &'static str, chat: &str) -> Error {
        let gone = || Error::RecipientGone { provider: provider.to_owned(), chat: chat.to_owned() };
        match (self.status, self.code) {
            // Discord always says how long; a second is the floor for one that did not.
            (429, _) => Error::RateLimited {
                retry_after: self.retry_after.unwrap_or(Duration::from_secs(1)),
            },
            (401, _) => Error::Unauthorized { provider: provider.to_owned() },
            // Unknown channel or user, cannot DM this user, missing access to the channel.
            (_, 10003 | 10013 | 50001 | 50007) | (404, _) => gone(),
            (413, _) | (_, 40005) => {
                Error::TooLarge { what: format!("a request to {op}"), size: 0, limit: 0 }
            }
            // Discord refusing the request as it is: sending it again does not help.
            (400..=499, _) => Error::InvalidInput { reason: self.to_string() },
            _ => Error::provider(provider, op, self),
        }
    }
}

/// The typed error for what serenity reported during `op`.
pub(crate) fn typed(provider: &str, op: &'static str, chat: &str, e: serenity::Error) -> Error {
    if let serenity::Error::Http(HttpError::UnsuccessfulRequest(r)) = &e {
        let refusal = Refusal {
            status: r.status_code.as_u16(),
            code: u64::try_from(r.error.code).unwrap_or(0),
            message: r.error.message.clone(),
            retry_after: None,
        };
        return refusal.typed(provider, op, chat);
    }
    Error::provider(provider, op, e)
}

/// Whether Discord answered a call `401`: the token was reset or revoked.
pub(crate) fn is_unauthorized(e: &serenity::Error) -> bool {
    matches!(
        e,
        serenity::Error::Http(HttpError::UnsuccessfulRequest(r)) if r.status_code.as_u16() == 401
    )
}

/// Whether a gateway failure can never heal by connecting again: the token or the intents
/// are refused.
pub(crate) fn is_fatal(e: &serenity::Error) -> bool {
    use serenity::gateway::GatewayError as G;
    matches!(
        e,
        serenity::Error::Gateway(
            G::InvalidAuthentication
                | G::InvalidGatewayIntents
                | G::DisallowedGatewayIntents
                | G::InvalidShardData
                | G::OverloadedShard
        )
    ) || is_unauthorized(e)
}

/// Intents a bot needs for what this provider maps: guild and direct messages with their
/// content, and reactions in both.
pub(crate) fn default_intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::GUILD_MESSAGE_REACTIONS
        | GatewayIntents::DIRECT_MESSAGE_REACTIONS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_refusals_become_the_contract_s_typed_errors() {
        let body =
            br#"{"message": "You are being rate limited.", "retry_after": 0.25, "global": false}"#;
        let limited = Refusal::read(429, None, body).typed("d", "send", "7");
        assert!(
            matches!(limited, Error::RateLimited { retry_after } if retry_after == Duration::from_millis(250))
        );
        let header = Refusal::read(429, Some("2"), body).typed("d", "send", "7");
        assert!(matches!(header, Error::RateLimited { retry_after } if retry_after.as_secs() == 2));
        let unknown = Refusal::read(429, None, b"not json").typed("d", "send", "7");
        assert!(
            matches!(unknown, Error::RateLimited { retry_after } if retry_after.as_secs() == 1)
        );
        let revoked = Refusal::read(401, None, br#"{"message": "401: Unauthorized", "code": 0}"#);
        assert!(matches!(revoked.typed("d", "send", "7"), Error::Unauthorized { .. }));
        let dm = Refusal::read(
            403,
            None,
            br#"{"message": "Cannot send messages to this user", "code": 50007}"#,
        );
        assert!(
            matches!(dm.typed("d", "send", "7"), Error::RecipientGone { chat, .. } if chat == "7")
        );
        let big = Refusal::read(413, None, b"");
        assert!(matches!(big.typed("d", "send", "7"), Error::TooLarge { .. }));
        let bad = Refusal::read(400, None, br#"{"message": "Invalid Form Body", "code": 50035}"#);
        assert!(!bad.typed("d", "send", "7").is_retryable());
        let down = Refusal::read(502, None, b"");
        assert!(down.typed("d", "send", "7").is_retryable());
    }
}
