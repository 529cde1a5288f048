//! Errors as the Graph API answers them: the faults a test injects, and the error envelope
//! `{"error": {"message", "type", "code", "error_subcode"?, "error_data"?, "fbtrace_id"}}`
//! every failed call is answered with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::channel::Channel;
use super::ids;

/// An error the stand-in answers a call with instead of running it, queued with
/// [`GraphServer::fail_next`](super::GraphServer::fail_next).
///
/// Where WhatsApp and the Messenger Platform answer the same condition differently
/// ([`RecipientGone`](Self::RecipientGone), [`OutsideWindow`](Self::OutsideWindow)), the
/// answer follows the channel the fault was queued for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// HTTP `429` with code `4`, `"(#4) Application request limit reached"`.
    TooManyRequests,
    /// HTTP `400` with code `4`: the app's request limit, as the Graph API usually reports it.
    AppRateLimited,
    /// HTTP `400` with code `80007`, `"(#80007) Rate limit issues"`: the WhatsApp Business
    /// Account's (or Instagram account's) limit.
    AccountRateLimited,
    /// HTTP `400` with code `130429`, `"(#130429) Rate limit hit"`: WhatsApp's throughput
    /// limit per phone number.
    ThroughputLimited,
    /// HTTP `401` with code `190` and subcode `463`, `"Error validating access token: Session
    /// has expired"`, for this one call (see
    /// [`GraphServer::expire_token`](super::GraphServer::expire_token) for every call).
    TokenExpired,
    /// HTTP `400`: on WhatsApp code `131026`, `"(#131026) Message Undeliverable"` (the number
    /// is not on WhatsApp, or can no longer be reached); on Messenger and Instagram code `551`
    /// with subcode `1545041`, `"(#551) This person isn't available right now."`.
    RecipientGone,
    /// HTTP `400`: on WhatsApp code `131047`, `"(#131047) Re-engagement message"`; on
    /// Messenger and Instagram code `10` with subcode `2018278`, `"(#10) This message is sent
    /// outside of allowed window."`.
    OutsideWindow,
    /// HTTP `500` with code `1`, `"An unknown error occurred"`.
    UnknownError,
    /// HTTP `500` with code `2`, `"An unexpected error has occurred. Please retry your request
    /// later."`.
    ServiceUnavailable,
    /// Any other error. A status outside `400..=599` is answered as `400`.
    Error {
        /// The HTTP status.
        status: u16,
        /// The error's `code`.
        code: u32,
        /// The error's `error_subcode`, if any.
        subcode: Option<u32>,
        /// The error's `message`.
        message: String,
    },
}

/// A failed call as the Graph API answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GraphError {
    pub(super) status: u16,
    pub(super) message: String,
    /// The error's `type`.
    pub(super) kind: &'static str,
    pub(super) code: u32,
    pub(super) subcode: Option<u32>,
    /// WhatsApp's `error_data.details`, for WhatsApp's own codes.
    pub(super) details: Option<String>,
    /// Whether `is_transient: true` is added, as the Graph API does for its retryable codes.
    pub(super) transient: bool,
}

impl GraphError {
    fn new(status: u16, code: u32, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind: "OAuthException",
            code,
            subcode: None,
            details: None,
            transient: false,
        }
    }

    fn subcode(mut self, subcode: u32) -> Self {
        self.subcode = Some(subcode);
        self
    }

    fn details(mut self, details: &str) -> Self {
        self.details = Some(details.to_owned());
        self
    }

    fn transient(mut self) -> Self {
        self.transient = true;
        self
    }

    /// `400`, code `100`: a missing or malformed parameter.
    pub(super) fn invalid_parameter(what: impl std::fmt::Display) -> Self {
        Self::new(400, 100, format!("(#100) {what}"))
    }

    /// `400`, code `100`, subcode `33`: a path naming an object the token cannot reach, in a
    /// `get` or `post` request.
    pub(super) fn unknown_object(id: &str, verb: &str) -> Self {
        let mut e = Self::new(
            400,
            100,
            format!(
                "Unsupported {verb} request. Object with ID '{id}' does not exist, cannot be \
                 loaded due to missing permissions, or does not support this operation."
            ),
        )
        .subcode(33);
        e.kind = "GraphMethodException";
        e
    }

    /// `404`, code `100`: a download of media the stand-in does not have.
    pub(super) fn media_not_found() -> Self {
        Self::new(404, 100, "(#100) Media not found")
    }

    /// `400`, code `2500`: a path the Graph API does not know.
    pub(super) fn unknown_path() -> Self {
        Self::new(400, 2500, "Unknown path components")
    }

    /// `400`, code `104`: no access token.
    pub(super) fn token_missing() -> Self {
        Self::new(400, 104, "An access token is required to request this resource.")
    }

    /// `401`, code `190`: a token that is not the server's.
    pub(super) fn token_invalid() -> Self {
        Self::new(401, 190, "Invalid OAuth access token - Cannot parse access token")
    }

    /// `401`, code `190`, subcode `463`: an expired token.
    pub(super) fn token_expired() -> Self {
        Self::new(401, 190, "Error validating access token: Session has expired").subcode(463)
    }

    /// `400`, code `131047`: a WhatsApp message outside the customer service window.
    pub(super) fn re_engagement() -> Self {
        Self::new(400, 131_047, "(#131047) Re-engagement message").details(
            "Message failed to send because more than 24 hours have passed since the customer \
             last replied to this number.",
        )
    }

    /// The answer to an injected fault on a channel.
    pub(super) fn from_fault(fault: &Fault, channel: Channel) -> Self {
        let messaging = channel.is_messaging();
        match fault {
            Fault::TooManyRequests => {
                Self::new(429, 4, "(#4) Application request limit reached").transient()
            }
            Fault::AppRateLimited => {
                Self::new(400, 4, "(#4) Application request limit reached").transient()
            }
            Fault::AccountRateLimited => Self::new(400, 80_007, "(#80007) Rate limit issues")
                .details("The account has reached its API call rate limit."),
            Fault::ThroughputLimited => Self::new(400, 130_429, "(#130429) Rate limit hit")
                .details("Cloud API message throughput has been reached."),
            Fault::TokenExpired => Self::token_expired(),
            Fault::RecipientGone if messaging => {
                Self::new(400, 551, "(#551) This person isn't available right now.")
                    .subcode(1_545_041)
            }
            Fault::RecipientGone => Self::new(400, 131_026, "(#131026) Message Undeliverable")
                .details("Unable to deliver message: the recipient cannot be reached."),
            Fault::OutsideWindow if messaging => Self::new(
                400,
                10,
                "(#10) This message is sent outside of allowed window. Learn more about the \
                 new policy here: https://developers.facebook.com/docs/messenger-platform/policy-overview",
            )
            .subcode(2_018_278),
            Fault::OutsideWindow => Self::re_engagement(),
            Fault::UnknownError => Self::new(500, 1, "An unknown error occurred").transient(),
            Fault::ServiceUnavailable => Self::new(
                500,
                2,
                "An unexpected error has occurred. Please retry your request later.",
            )
            .transient(),
            Fault::Error { status, code, subcode, message } => {
                let status = if (400..=599).contains(status) { *status } else { 400 };
                let mut e = Self::new(status, *code, message.clone());
                e.subcode = *subcode;
                e
            }
        }
    }

    /// The error envelope.
    pub(super) fn body(&self) -> Value {
        let mut error = json!({
            "message": self.message,
            "type": self.kind,
            "code": self.code,
            "fbtrace_id": ids::fbtrace_id(),
        });
        if let Some(subcode) = self.subcode {
            error["error_subcode"] = json!(subcode);
        }
        if let Some(details) = &self.details {
            error["error_data"] = json!({ "messaging_product": "whatsapp", "details": details });
        }
        if self.transient {
            error["is_transient"] = json!(true);
        }
        json!({ "error": error })
    }
}

impl IntoResponse for GraphError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_answer_per_channel() {
        let wa = GraphError::from_fault(&Fault::RecipientGone, Channel::WhatsApp);
        assert_eq!((wa.status, wa.code, wa.subcode), (400, 131_026, None));
        let fb = GraphError::from_fault(&Fault::RecipientGone, Channel::Messenger);
        assert_eq!((fb.status, fb.code, fb.subcode), (400, 551, Some(1_545_041)));
        let ig = GraphError::from_fault(&Fault::OutsideWindow, Channel::Instagram);
        assert_eq!((ig.status, ig.code, ig.subcode), (400, 10, Some(2_018_278)));
        let odd = Fault::Error { status: 200, code: 9, subcode: None, message: "x".to_owned() };
        assert_eq!(GraphError::from_fault(&odd, Channel::WhatsApp).status, 400);
    }

    #[test]
    fn the_envelope_has_graphs_fields() {
        let body = GraphError::token_expired().body();
        let error = &body["error"];
        assert_eq!(error["type"], "OAuthException");
        assert_eq!(error["code"], 190);
        assert_eq!(error["error_subcode"], 463);
        assert!(error["fbtrace_id"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(error.get("error_data").is_none());
        assert!(GraphError::re_engagement().body()["error"]["error_data"]["details"].is_string());
    }
}
