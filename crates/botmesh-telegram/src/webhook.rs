//! The webhook endpoint: Telegram posts each update here, and is answered `200` only once the
//! bot took it.

use std::net::SocketAddr;
use std::sync::Arc;

use botmesh_traits::ProviderEvent;
use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Bytes;
use botmesh_traits::webhook::axum::extract::State;
use botmesh_traits::webhook::axum::http::HeaderMap;
use botmesh_traits::webhook::axum::response::{IntoResponse, Response};
use botmesh_traits::webhook::axum::routing::post;
use botmesh_traits::webhook::{self, Rejection};
use teloxide_core::types::Update;

use crate::TelegramProvider;
use crate::inbound::map_update;
use crate::polling::answer_callback;
use crate::state::{Inner, Mode};

/// The header Telegram signs webhook requests with.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

#[derive(Clone)]
struct Endpoint(Arc<Inner>);

async fn receive(
    State(Endpoint(inner)): State<Endpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Mode::Webhook { secret, .. } = &inner.mode else {
        return Rejection::Unavailable.into_response();
    };
    let given = headers.get(SECRET_HEADER).map(|v| v.as_bytes());
    if !webhook::secret_matches(given, secret.as_bytes()) {
        return Rejection::Unauthorized.into_response();
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(e) => {
            let reason = format!("a webhook body that is not a Telegram update: {e}");
            inner.report(ProviderEvent::Rejected { reason: reason.clone() });
            return Rejection::malformed(reason).into_response();
        }
    };
    let mapped = map_update(&inner.id, inner.username().as_deref(), &update);
    let verdict = inner.slot.accept(mapped.inbound).await;
    if verdict.is_taken()
        && let Some(query) = mapped.callback
    {
        answer_callback(&inner, query);
    }
    verdict.into_response()
}

impl TelegramProvider {
    /// The webhook endpoint to mount in your axum server, at the path of the public URL given
    /// to [`webhook`](Self::webhook), bounded by the provider's limits. In polling mode every
    /// request is answered `503`.
    pub fn router(&self) -> Router {
        let path = match &self.inner.mode {
            Mode::Webhook { url, .. } => url.path().to_owned(),
            Mode::Polling { .. } => "/".to_owned(),
        };
        let router =
            Router::new().route(&path, post(receive)).with_state(Endpoint(Arc::clone(&self.inner)));
        webhook::harden(router, &self.inner.limits)
    }

    /// Serves [`router`](Self::router) on `addr` until the provider stops, for those without
    /// a server of their own. Put TLS in front of it (Telegram posts to HTTPS only).
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<()> {
        webhook::serve(self.router(), addr, self.inner.slot.closed()).await
    }
}
