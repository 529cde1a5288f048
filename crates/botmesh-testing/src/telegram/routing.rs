//! The HTTP surface: `{base}/bot{token}/{method}` for calls (any HTTP method, parameters in
//! the query string or the body) and `GET {base}/file/bot{token}/{file_path}` for downloads.
//!
//! A call is checked in Telegram's order: the path (`404 Not Found`), the token
//! (`401 Unauthorized`), the method (`404 Not Found`), then an injected fault, then the
//! parameters (`400 Bad Request: ...`). Every answer is the Bot API's JSON envelope, malformed
//! requests included.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::Value;

use super::faults::{self, ApiError};
use super::methods::{self, Method};
use super::params::{MAX_BODY, Params};
use super::state::Shared;

/// The stand-in's routes.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/file/{bot_token}/{*file_path}", get(download))
        .route("/{bot_token}/{method}", any(call))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

async fn not_found() -> Response {
    ApiError::not_found().into_response()
}

/// The token in a `bot{token}` path segment, checked.
fn token<'a>(shared: &Shared, segment: &'a str) -> Result<&'a str, ApiError> {
    let token = segment.strip_prefix("bot").ok_or_else(ApiError::not_found)?;
    shared.authorize(token)?;
    Ok(token)
}

async fn call(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Response {
    match serve(&shared, path, request).await {
        Ok(result) => faults::ok(result),
        Err(e) => e.into_response(),
    }
}

async fn serve(
    shared: &Arc<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Result<Value, ApiError> {
    let Path((segment, name)) = path.map_err(|_| ApiError::not_found())?;
    let token = token(shared, &segment)?;
    let method = Method::parse(&name).ok_or_else(ApiError::not_found)?;
    let fault = shared.update(|inner| {
        inner.calls.push(method.name());
        inner.bot_id = Shared::bot_id(token);
        let queued = inner.faults.get_mut(&method.name().to_ascii_lowercase())?;
        let fault = queued.pop_front();
        if queued.is_empty() {
            inner.faults.remove(&method.name().to_ascii_lowercase());
        }
        fault
    });
    if let Some(fault) = fault {
        return Err(ApiError::from(&fault));
    }
    let params = Params::from_request(request).await?;
    methods::dispatch(shared, method, &params, token).await
}

async fn download(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let Ok(Path((segment, file_path))) = path else {
        return ApiError::not_found().into_response();
    };
    if let Err(e) = token(&shared, &segment) {
        return e.into_response();
    }
    match methods::download(&shared, &file_path) {
        Some(bytes) => ([(CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        None => ApiError::not_found().into_response(),
    }
}
