//! What a webhook refuses before the bot sees the message.

use axum::response::{IntoResponse, Response};

/// Why a webhook refused a request before handing anything to the bot.
///
/// As a response it is a status and one fixed word (`unauthorized`, `malformed`,
/// `too_large`, `unavailable`): it never echoes the request, its headers or a secret, and the
/// [`Malformed`](Self::Malformed) reason stays in this process. Its `Display` is for the
/// provider's logs, and holds no more than the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The secret or signature is missing or wrong. Answered `401`.
    #[error("unauthorized webhook request")]
    Unauthorized,
    /// The request is not one the platform sends: its body does not parse, a field it always
    /// carries is missing. Answered `400`.
    #[error("malformed webhook request: {reason}")]
    Malformed {
        /// What is wrong, for the logs. Never put the secret, a header or a token in it.
        reason: String,
    },
    /// The body is larger than the webhook takes. Answered `413`.
    #[error("webhook request body too large")]
    TooLarge,
    /// The webhook cannot take anything right now. Answered `503`, so the platform delivers
    /// the request again.
    #[error("webhook unavailable")]
    Unavailable,
}

impl Rejection {
    /// A [`Rejection::Malformed`] saying `reason`.
    pub fn malformed(reason: impl Into<String>) -> Self {
        Self::Malformed { reason: reason.into() }
    }

    /// The HTTP status it is answered with: `401`, `400`, `413` or `503`.
    pub const fn status(&self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Malformed { .. } => 400,
            Self::TooLarge => 413,
            Self::Unavailable => 503,
        }
    }

    /// The word its response body holds: `unauthorized`, `malformed`, `too_large` or
    /// `unavailable`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Malformed { .. } => "malformed",
            Self::TooLarge => "too_large",
            Self::Unavailable => "unavailable",
        }
    }
}

/// [`Rejection::status`] with [`Rejection::as_str`] as a plain-text body.
impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        super::verdict::word(self.status(), self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rejection_answers_its_status_and_a_fixed_word() {
        let rejections = [
            Rejection::Unauthorized,
            Rejection::malformed("token abc123 in field x"),
            Rejection::TooLarge,
            Rejection::Unavailable,
        ];
        let mut answers = Vec::new();
        for rejection in rejections {
            let response = rejection.into_response();
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
            answers.push((status, String::from_utf8(body.to_vec()).unwrap()));
        }
        let expected =
            [(401, "unauthorized"), (400, "malformed"), (413, "too_large"), (503, "unavailable")];
        assert_eq!(answers, expected.map(|(s, b)| (s, b.to_owned())));
    }

    #[test]
    fn the_reason_shows_in_logs_only() {
        let rejection = Rejection::malformed("no chat id");
        assert_eq!(rejection.to_string(), "malformed webhook request: no chat id");
        assert_eq!(Rejection::Unauthorized.to_string(), "unauthorized webhook request");
    }
}
