//! The routes and their handlers.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::snapshot::Snapshot;
use crate::{Ops, auth, page};

pub(crate) fn router(ops: Ops) -> Router {
    let mut router = Router::new().route("/livez", get(livez)).route("/readyz", get(readyz));
    if ops.status_page {
        router = router.route("/status", get(status_html)).route("/status.json", get(status_json));
    }
    #[cfg(feature = "prometheus")]
    if ops.metrics.is_some() {
        router = router.route("/metrics", get(metrics));
    }
    router.with_state(ops)
}

async fn livez(State(ops): State<Ops>) -> Response {
    let health = ops.bot.health();
    let code = if health.live { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(health)).into_response()
}

async fn readyz(State(ops): State<Ops>) -> Response {
    let health = ops.bot.health();
    let code = if health.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(health)).into_response()
}

/// Whether the request may see the page or the metrics: it carries the token, if one is set.
fn allowed(ops: &Ops, headers: &HeaderMap) -> bool {
    ops.token.as_deref().is_none_or(|token| auth::authorized(headers, token))
}

async fn status_json(State(ops): State<Ops>, headers: HeaderMap) -> Response {
    if !allowed(&ops, &headers) {
        return auth::challenge();
    }
    Json(Snapshot::of(&ops.bot).await).into_response()
}

async fn status_html(State(ops): State<Ops>, headers: HeaderMap) -> Response {
    if !allowed(&ops, &headers) {
        return auth::challenge();
    }
    page::render(&Snapshot::of(&ops.bot).await, ops.refresh).into_response()
}

#[cfg(feature = "prometheus")]
async fn metrics(State(ops): State<Ops>, headers: HeaderMap) -> Response {
    if !allowed(&ops, &headers) {
        return auth::challenge();
    }
    let Some(handle) = &ops.metrics else { return StatusCode::NOT_FOUND.into_response() };
    handle.run_upkeep();
    let content_type = [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")];
    (content_type, handle.render()).into_response()
}
