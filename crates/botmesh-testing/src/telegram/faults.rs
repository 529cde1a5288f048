//! Errors as the Bot API answers them: the faults a test injects, and the error envelope
//! `{"ok": false, "error_code": N, "description": "..."}` every failed call is answered with.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error the stand-in answers instead of running a method, queued with
/// [`TelegramServer::fail_next`](super::TelegramServer::fail_next).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// `429 Too Many Requests: retry after N` with `"parameters": {"retry_after": N}`; the
    /// Bot API counts in whole seconds, so `retry_after` is rounded up to at least one second.
    /// teloxide surfaces it as `RequestError::RetryAfter`.
    TooManyRequests {
        /// How long the client is told to wait.
        retry_after: Duration,
    },
    /// `401 Unauthorized`, what a revoked or wrong token gets. teloxide surfaces it as
    /// `RequestError::Api(ApiError::InvalidToken)`.
    Unauthorized,
    /// A server error with this status (`500`, `502`, ...; anything outside `500..=599` is
    /// answered as `500`). Note that teloxide sleeps 10 seconds after any 5xx answer before it
    /// reports the error.
    ServerError(u16),
    /// Any other error the Bot API answers, e.g. status `403` with description
    /// `"Forbidden: bot was blocked by the user"` (teloxide's `ApiError::BotBlocked`).
    /// A status outside `400..=599` is answered as `400`.
    Api {
        /// The HTTP status, repeated in `error_code`.
        status: u16,
        /// The `description`, which clients match to classify the error.
        description: String,
    },
}

/// A failed call as the Bot API answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ApiError {
    pub(super) code: u16,
    pub(super) description: String,
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, description: impl Into<String>) -> Self {
        Self { code, description: description.into(), retry_after: None }
    }

    /// `400 Bad Request: {what}`.
    pub(super) fn bad_request(what: impl std::fmt::Display) -> Self {
        Self::new(400, format!("Bad Request: {what}"))
    }

    /// `401 Unauthorized`.
    pub(super) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized")
    }

    /// `404 Not Found`: an unknown method or path.
    pub(super) fn not_found() -> Self {
        Self::new(404, "Not Found")
    }

    /// `409 Conflict: {what}`.
    pub(super) fn conflict(what: &str) -> Self {
        Self::new(409, format!("Conflict: {what}"))
    }
}

impl From<&Fault> for ApiError {
    fn from(fault: &Fault) -> Self {
        match fault {
            Fault::TooManyRequests { retry_after } => {
                let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                let secs = secs.max(1);
                Self {
                    code: 429,
                    description: format!("Too Many Requests: retry after {secs}"),
                    retry_after: Some(secs),
                }
            }
            Fault::Unauthorized => Self::unauthorized(),
            Fault::ServerError(status) => {
                let status = if (500..=599).contains(status) { *status } else { 500 };
                let reason = StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("Internal Server Error");
                Self::new(status, reason)
            }
            Fault::Api { status, description } => {
                let status = if (400..=599).contains(status) { *status } else { 400 };
                Self::new(status, description.clone())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::BAD_REQUEST);
        let mut body = json!({
            "ok": false,
            "error_code": self.code,
            "description": self.description,
        });
        if let Some(secs) = self.retry_after {
            body["parameters"] = json!({ "retry_after": secs });
        }
        (status, axum::Json(body)).into_response()
    }
}

/// A successful call: `{"ok": true, "result": ...}`.
pub(super) fn ok(result: Value) -> Response {
    axum::Json(json!({ "ok": true, "result": result })).into_response()
}
