//! The webhook endpoint: the verification handshake, signed bodies, and a `200` only once
//! every message of a body is queued.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use botmesh_traits::ProviderEvent;
use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Bytes;
use botmesh_traits::webhook::axum::extract::{Query, State};
use botmesh_traits::webhook::axum::http::{HeaderMap, StatusCode};
use botmesh_traits::webhook::axum::response::{IntoResponse, Response};
use botmesh_traits::webhook::axum::routing::get;
use botmesh_traits::webhook::{self, Rejection};
use botmesh_traits::{Verdict, webhook::secret_matches};

use crate::MetaProvider;
use crate::inbound::{Item, parse};
use crate::provider::Inner;
use crate::signature::{SIGNATURE_HEADER, verify};

#[derive(Clone)]
struct Endpoint(Arc<Inner>);

/// `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`: echoes the challenge when the
/// token is this app's.
async fn handshake(
    State(Endpoint(inner)): State<Endpoint>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let token = query.get("hub.verify_token").map(String::as_bytes);
    let subscribing = query.get("hub.mode").is_some_and(|m| m == "subscribe");
    match (subscribing, query.get("hub.challenge")) {
        (true, Some(challenge)) if secret_matches(token, inner.verify_token.as_bytes()) => {
            (StatusCode::OK, challenge.clone()).into_response()
        }
        (true, Some(_)) => Rejection::Unauthorized.into_response(),
        _ => Rejection::malformed("not a verification request").into_response(),
    }
}

/// `POST`: a signed body of messages and receipts.
async fn receive(
    State(Endpoint(inner)): State<Endpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let signature = headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes());
    if !verify(&inner.app_secret, &body, signature) {
        return Rejection::Unauthorized.into_response();
    }
    let items = match parse(&inner.channel, &inner.id, &body) {
        Ok(items) => items,
        Err(why) => {
            let reason = format!("a webhook body that is not a Meta {} body: {why}", inner.id);
            inner.report(ProviderEvent::Rejected { reason: reason.clone() });
            return Rejection::malformed(reason).into_response();
        }
    };
    // In the body's order, so that one user's messages keep theirs. Answered 200 only once
    // each is taken (or can never be); the first that cannot be taken now makes Meta deliver
    // the whole body again, and what was taken already is then a duplicate.
    for item in items {
        match item {
            Item::Message(inbound) => {
                let id = inbound.id.clone();
                match inner.slot.accept(inbound).await {
                    verdict if verdict.is_taken() => {}
                    Verdict::Unavailable => return Verdict::Unavailable.into_response(),
                    verdict => {
                        let reason = format!("message {id} refused by the bot: {verdict}");
                        inner.report(ProviderEvent::Rejected { reason });
                    }
                }
            }
            Item::Delivery(delivery) => inner.report(ProviderEvent::Delivery(delivery)),
            Item::Elsewhere(account) => {
                // The app posts every account's messages here: give each account its own
                // provider and endpoint (or app), or they are refused, and visibly so.
                let reason =
                    format!("a message for account {account:?} reached the {} endpoint", inner.id);
                inner.report(ProviderEvent::Rejected { reason });
            }
        }
    }
    Verdict::Queued.into_response()
}

impl MetaProvider {
    /// The webhook endpoint at `path` (`GET` for the verification handshake, `POST` for
    /// messages), to mount in your axum server next to your own routes, bounded by the
    /// provider's limits. Point the app's webhook settings at it.
    pub fn router(&self, path: &str) -> Router {
        let router = Router::new()
            .route(path, get(handshake).post(receive))
            .with_state(Endpoint(Arc::clone(&self.inner)));
        webhook::harden(router, &self.inner.limits)
    }

    /// Serves [`router`](Self::router) at `path` on `addr` until the provider stops, for those
    /// without a server of their own. Put TLS in front of it (Meta posts to HTTPS only).
    pub async fn serve(&self, path: &str, addr: SocketAddr) -> std::io::Result<()> {
        webhook::serve(self.router(path), addr, self.inner.slot.closed()).await
    }
}
