//! The HTTP API routes a bot calls, as serenity's proxy setting (or any client pointed at the
//! stand-in) reaches them: `/api/v10/...`, plus the gateway's websocket at `/gateway` and the
//! files of attachments at `/attachments/...`.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::fixtures;
use super::gateway;
use super::records::{Fault, InteractionCallback, SentButton, SentFile, SentMessage, SentReaction};
use super::state::Shared;

type Shared_ = State<Arc<Shared>>;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/gateway", get(upgrade))
        .route("/api/v10/gateway", get(gateway_url))
        .route("/api/v10/gateway/bot", get(gateway_bot))
        .route("/api/v10/users/@me", get(me))
        .route("/api/v10/channels/{channel}/messages", post(create_message))
        .route(
            "/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me",
            put(add_reaction).delete(remove_reaction),
        )
        .route("/api/v10/interactions/{id}/{token}/callback", post(interaction_callback))
        .route("/attachments/{id}/{name}", get(attachment))
        .fallback(|| async { error(StatusCode::NOT_FOUND, 0, "404: Not Found") })
        .with_state(shared)
}

/// Discord's JSON error body.
fn error(status: StatusCode, code: u64, message: &str) -> Response {
    (status, axum::Json(json!({"code": code, "message": message}))).into_response()
}

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let presented = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    presented.is_some_and(|t| shared.authorized(t))
}

async fn upgrade(ws: WebSocketUpgrade, State(shared): Shared_) -> Response {
    ws.on_upgrade(move |socket| gateway::serve(socket, shared))
}

fn ws_url(shared: &Shared) -> String {
    format!("{}/gateway", shared.base().replacen("http", "ws", 1))
}

async fn gateway_url(State(shared): Shared_) -> Response {
    axum::Json(json!({"url": ws_url(&shared)})).into_response()
}

async fn gateway_bot(State(shared): Shared_, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    let (remaining, reset_after) = {
        let mut s = shared.lock();
        let reset = shared.config.session_reset;
        if s.starts_reset.elapsed() >= reset {
            s.starts_left = shared.config.session_starts;
            s.starts_reset = Instant::now();
        }
        (s.starts_left, reset.saturating_sub(s.starts_reset.elapsed()))
    };
    axum::Json(json!({
        "url": ws_url(&shared), "shards": 1,
        "session_start_limit": {
            "total": shared.config.session_starts, "remaining": remaining,
            "reset_after": u64::try_from(reset_after.as_millis()).unwrap_or(u64::MAX),
            "max_concurrency": 1,
        },
    }))
    .into_response()
}

async fn me(State(shared): Shared_, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    axum::Json(shared.bot_user()).into_response()
}

/// An id as Discord writes it (a string) or as a number.
fn id_of(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The answer to a fault the test asked for.
fn fault_response(fault: Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after, header } => {
            let secs = retry_after.as_secs_f64();
            let body = json!({"message": "You are being rate limited.", "retry_after": secs, "global": false});
            let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            if header && let Ok(v) = secs.to_string().parse() {
                response.headers_mut().insert("retry-after", v);
            }
            response
        }
        Fault::Status { status, code, message } => {
            error(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), code, &message)
        }
    }
}

/// The JSON payload and files of a create-message request, JSON or multipart.
async fn payload(request: Request) -> Result<(Value, Vec<SentFile>), Response> {
    let bad = |m: &str| error(StatusCode::BAD_REQUEST, 50035, m);
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if !multipart {
        let body = Bytes::from_request(request, &()).await.map_err(|_| bad("unreadable body"))?;
        let json = serde_json::from_slice(&body).map_err(|_| bad("Invalid Form Body"))?;
        return Ok((json, Vec::new()));
    }
    let mut form = Multipart::from_request(request, &()).await.map_err(|_| bad("bad form"))?;
    let (mut json, mut files) = (json!({}), Vec::new());
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let data = field.bytes().await.map_err(|_| bad("bad form field"))?;
        if name == "payload_json" {
            json = serde_json::from_slice(&data).map_err(|_| bad("Invalid Form Body"))?;
        } else {
            files.push(SentFile { file_name: file_name.unwrap_or(name), data: data.to_vec() });
        }
    }
    Ok((json, files))
}

async fn create_message(
    State(shared): Shared_,
    Path(channel): Path<u64>,
    request: Request,
) -> Response {
    if !authorized(&shared, request.headers()) {
        return unauthorized();
    }
    if let Some(fault) = shared.lock().send_faults.pop_front() {
        return fault_response(fault);
    }
    let (payload, files) = match payload(request).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let content = payload["content"].as_str().unwrap_or_default().to_owned();
    let buttons: Vec<SentButton> = payload["components"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
        .map(|b| SentButton {
            custom_id: b["custom_id"].as_str().unwrap_or_default().to_owned(),
            label: b["label"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    let embed_images: Vec<String> = payload["embeds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["image"]["url"].as_str().map(str::to_owned))
        .collect();
    if content.is_empty() && buttons.is_empty() && embed_images.is_empty() && files.is_empty() {
        return error(StatusCode::BAD_REQUEST, 50006, "Cannot send an empty message");
    }
    let reply_to = id_of(&payload["message_reference"]["message_id"]);
    let id = shared.next_id();
    let mut message = fixtures::message(id, channel, &shared.bot_user(), None, &content);
    message["components"] = payload["components"].clone();
    if message["components"].is_null() {
        message["components"] = json!([]);
    }
    let mut s = shared.lock();
    s.messages.insert(id, message.clone());
    s.sent.push(SentMessage {
        id,
        channel,
        content,
        reply_to,
        buttons,
        embed_images,
        files,
        payload,
    });
    drop(s);
    axum::Json(message).into_response()
}

async fn reaction(
    shared: &Shared,
    headers: &HeaderMap,
    (channel, message, emoji): (u64, u64, String),
    added: bool,
) -> Response {
    if !authorized(shared, headers) {
        return unauthorized();
    }
    shared.lock().reactions.push(SentReaction { channel, message, emoji, added });
    StatusCode::NO_CONTENT.into_response()
}

async fn add_reaction(
    State(shared): Shared_,
    headers: HeaderMap,
    Path(target): Path<(u64, u64, String)>,
) -> Response {
    reaction(&shared, &headers, target, true).await
}

async fn remove_reaction(
    State(shared): Shared_,
    headers: HeaderMap,
    Path(target): Path<(u64, u64, String)>,
) -> Response {
    reaction(&shared, &headers, target, false).await
}

async fn interaction_callback(
    State(shared): Shared_,
    Path((interaction, token)): Path<(u64, String)>,
    body: Bytes,
) -> Response {
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
    };
    let mut s = shared.lock();
    let Some(at) = s.dispatched.get(&interaction).copied() else {
        return error(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
    };
    if s.callbacks.iter().any(|c| c.interaction == interaction) {
        return error(StatusCode::BAD_REQUEST, 40060, "Interaction has already been acknowledged.");
    }
    s.callbacks.push(InteractionCallback {
        interaction,
        token,
        kind: payload["type"].as_u64().unwrap_or(0),
        data: payload["data"].clone(),
        after: at.elapsed(),
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn attachment(State(shared): Shared_, Path((id, name)): Path<(u64, String)>) -> Response {
    let file = shared.lock().files.get(&format!("{id}/{name}")).cloned();
    match file {
        Some((mime, data)) => ([(header::CONTENT_TYPE, mime)], Body::from(data)).into_response(),
        None => error(StatusCode::NOT_FOUND, 0, "404: Not Found"),
    }
}
