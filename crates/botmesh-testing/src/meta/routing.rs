//! The HTTP surface. Paths may start with a version segment (`/v21.0/...`), which is
//! accepted and ignored:
//!
//! - `POST /{id}/messages`: a send; `{id}` is the phone number id (WhatsApp), the page id
//!   (Messenger), the Instagram account id (Instagram) or `me` (the page, or the Instagram
//!   account for a recipient who only ever wrote on Instagram).
//! - `POST /{phone_number_id}/media`: a WhatsApp media upload.
//! - `GET /{id}`: a media id's metadata, or one of the business's own objects.
//! - `GET /media-download/{media_id}`: the bytes behind a media id's `url`.
//! - `GET /cdn/{media_id}`: the bytes behind a Messenger or Instagram attachment's URL, the
//!   one route that wants no token.
//!
//! A call is checked in the Graph API's order: the path (`400`, code `2500`), the token
//! (`Authorization: Bearer <token>` or the `access_token` query parameter: `400` code `104`
//! when missing, `401` code `190` when wrong or expired), the id in the path (`400` code
//! `100`), an injected fault, then the body (`400` code `100`). Every error is the Graph
//! API's envelope.

use std::sync::Arc;

use axum::Router;
use axum::body::to_bytes;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::Method;
use axum::http::header::AUTHORIZATION;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::channel::Channel;
use super::faults::GraphError;
use super::media::{self, MAX_BODY};
use super::state::Shared;
use super::{messaging, whatsapp};

/// The stand-in's routes: one handler that reads the path itself, so that the version
/// segment may be there or not.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).layer(DefaultBodyLimit::max(MAX_BODY)).with_state(shared)
}

/// A call the stand-in serves.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    Send(String),
    Upload(String),
    Object(String),
    Download(String),
    Public(String),
}

/// Whether a path segment is a Graph API version: `v21.0`, `v3`.
fn is_version(segment: &str) -> bool {
    let Some(number) = segment.strip_prefix('v') else { return false };
    let parts: Vec<&str> = number.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn route(method: &Method, path: &str) -> Option<Route> {
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.first().is_some_and(|s| is_version(s)) {
        segments.remove(0);
    }
    let owned = |s: &&str| (*s).to_owned();
    match (method, segments.as_slice()) {
        (&Method::GET, ["media-download", id]) => Some(Route::Download(owned(id))),
        (&Method::GET, ["cdn", id]) => Some(Route::Public(owned(id))),
        (&Method::POST, [node, "messages"]) => Some(Route::Send(owned(node))),
        (&Method::POST, [node, "media"]) => Some(Route::Upload(owned(node))),
        (&Method::GET, [id]) => Some(Route::Object(owned(id))),
        _ => None,
    }
}

/// The token of a call: `Authorization: Bearer <token>`, else `?access_token=<token>`.
fn token(request: &Request) -> Option<String> {
    let header = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some((scheme, token)) = header.and_then(|h| h.split_once(' '))
        && scheme.eq_ignore_ascii_case("bearer")
    {
        return Some(token.trim().to_owned());
    }
    let query = Query::<Vec<(String, String)>>::try_from_uri(request.uri()).ok()?;
    query.0.into_iter().find(|(k, _)| k == "access_token").map(|(_, v)| v)
}

fn authorize(shared: &Shared, token: Option<&str>) -> Result<(), GraphError> {
    let token = token.filter(|t| !t.is_empty()).ok_or_else(GraphError::token_missing)?;
    if shared.lock().token_expired {
        return Err(GraphError::token_expired());
    }
    if shared.config.access_token.as_deref().is_some_and(|t| t != token) {
        return Err(GraphError::token_invalid());
    }
    Ok(())
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    serve(&shared, request).await.unwrap_or_else(IntoResponse::into_response)
}

async fn serve(shared: &Shared, request: Request) -> Result<Response, GraphError> {
    let route =
        route(request.method(), request.uri().path()).ok_or_else(GraphError::unknown_path)?;
    if let Route::Public(id) = &route {
        return media::bytes(shared, id);
    }
    authorize(shared, token(&request).as_deref())?;
    let json = |v: Value| axum::Json(v).into_response();
    match route {
        Route::Send(node) => {
            let body = json_body(request).await?;
            send(shared, &node, &body).map(json)
        }
        Route::Upload(node) => media::upload(shared, &node, request).await.map(json),
        Route::Object(id) => media::object(shared, &id).map(json),
        Route::Download(id) | Route::Public(id) => media::bytes(shared, &id),
    }
}

/// The body of a send: a JSON object.
async fn json_body(request: Request) -> Result<Value, GraphError> {
    let bytes = to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|e| GraphError::invalid_parameter(format!("could not read the body: {e}")))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(body @ Value::Object(_)) => Ok(body),
        Ok(_) => Err(GraphError::invalid_parameter("The body must be a JSON object.")),
        Err(e) => Err(GraphError::invalid_parameter(format!("The body is not valid JSON: {e}"))),
    }
}

/// A send: the id in the path picks the channel, then a queued fault, then the channel's
/// own checks.
fn send(shared: &Shared, node: &str, body: &Value) -> Result<Value, GraphError> {
    let recipient = messaging::recipient(body).unwrap_or_default();
    let picked = shared.update(|inner| {
        let channel = shared.config.channel_of(node, inner, &recipient)?;
        Some((channel, inner.take_fault(channel)))
    });
    let (channel, fault) = picked.ok_or_else(|| GraphError::unknown_object(node, "post"))?;
    if let Some(fault) = fault {
        return Err(GraphError::from_fault(&fault, channel));
    }
    match channel {
        Channel::WhatsApp => whatsapp::send(shared, body),
        Channel::Messenger | Channel::Instagram => messaging::send(shared, channel, body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_with_or_without_a_version() {
        let send = Some(Route::Send("123".to_owned()));
        assert_eq!(route(&Method::POST, "/v21.0/123/messages"), send);
        assert_eq!(route(&Method::POST, "/123/messages"), send);
        assert_eq!(route(&Method::POST, "/v3/123/messages/"), send);
        assert_eq!(route(&Method::GET, "/v21.0/77"), Some(Route::Object("77".to_owned())));
        assert_eq!(route(&Method::GET, "/77"), Some(Route::Object("77".to_owned())));
        assert_eq!(
            route(&Method::GET, "/media-download/77"),
            Some(Route::Download("77".to_owned()))
        );
        assert_eq!(route(&Method::GET, "/cdn/77"), Some(Route::Public("77".to_owned())));
        assert_eq!(route(&Method::POST, "/v21.0/1/media"), Some(Route::Upload("1".to_owned())));
        assert_eq!(route(&Method::GET, "/v21.0/123/messages"), None);
        assert_eq!(route(&Method::POST, "/v21.0/a/b/c"), None);
        assert_eq!(route(&Method::GET, "/"), None);
    }

    #[test]
    fn versions_are_recognized() {
        for v in ["v21.0", "v3", "v19.10"] {
            assert!(is_version(v), "{v}");
        }
        for not in ["21.0", "v", "v1.", "v1.2.3", "vx", "me"] {
            assert!(!is_version(not), "{not}");
        }
    }
}
