//! The ingest endpoint: a mail service (an inbound-mail webhook) posts each raw RFC 822 mail
//! here, and is answered `200` only once the bot took it, so it retries what a crash
//! interrupted.
//!
//! A request proves where it comes from with the shared secret in [`SECRET_HEADER`], or with
//! `sha256=<hex>`, the HMAC-SHA256 of the body under the secret, in [`SIGNATURE_HEADER`]; both
//! compared in constant time. A wrong or missing one is answered `401`, a body over the limit
//! `413`, a malformed mail `400` (reported as a `Rejected` event: the service keeps or bounces
//! it), a mail the bot could not take now `503`.

use std::sync::Arc;

use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Bytes;
use botmesh_traits::webhook::axum::extract::State;
use botmesh_traits::webhook::axum::http::HeaderMap;
use botmesh_traits::webhook::axum::response::{IntoResponse, Response};
use botmesh_traits::webhook::axum::routing::post;
use botmesh_traits::webhook::{self, Rejection};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::EmailProvider;
use crate::parse::parse;
use crate::state::{Check, Inner, Mode};

/// The header carrying the shared secret.
pub const SECRET_HEADER: &str = "x-botmesh-secret";
/// The header carrying `sha256=<hex>`, the HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "x-botmesh-signature";

/// `sha256=<hex>` of the HMAC-SHA256 of `body` under `key`: what [`SIGNATURE_HEADER`] holds.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        // HMAC takes keys of any length.
        Err(_) => return String::new(),
    };
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Whether the request's headers prove it comes from the mail service.
fn authentic(check: &Check, headers: &HeaderMap, body: &[u8]) -> bool {
    match check {
        Check::Secret(secret) => {
            webhook::secret_matches(headers.get(SECRET_HEADER).map(|v| v.as_bytes()), secret)
        }
        Check::Hmac(key) => {
            let expected = signature(key, body);
            let given = headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes());
            !key.is_empty() && webhook::secret_matches(given, expected.as_bytes())
        }
    }
}

#[derive(Clone)]
struct Endpoint(Arc<Inner>);

async fn receive(
    State(Endpoint(inner)): State<Endpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Mode::Ingest { check, .. } = &inner.settings.mode else {
        return Rejection::Unavailable.into_response();
    };
    if !authentic(check, &headers, &body) {
        return Rejection::Unauthorized.into_response();
    }
    let parsed = match parse(&inner.id, &body, inner.settings.threading) {
        Ok(parsed) => parsed,
        Err(reason) => {
            let reason = format!("an ingested mail is malformed: {reason}");
            inner.reject(reason.clone());
            return Rejection::malformed(reason).into_response();
        }
    };
    if !inner.slot.is_open() {
        return Rejection::Unavailable.into_response();
    }
    if let Err(e) = inner
        .archive
        .keep(parsed.inbound.id.as_str(), parsed.inbound.chat.as_str(), &parsed.kept)
        .await
    {
        tracing::warn!(target: "botmesh", provider = inner.id, error = %e, "keeping a mail for threading failed");
    }
    inner.slot.accept(parsed.inbound).await.into_response()
}

impl EmailProvider {
    /// The ingest endpoint to mount in your axum server, at the provider's path (`/email` by
    /// default), bounded by the provider's limits. With an IMAP provider every request is
    /// answered `503`.
    pub fn router(&self) -> Router {
        let path = match &self.inner.settings.mode {
            Mode::Ingest { path, .. } => path.clone(),
            Mode::Imap(_) => "/email".to_owned(),
        };
        let router =
            Router::new().route(&path, post(receive)).with_state(Endpoint(Arc::clone(&self.inner)));
        webhook::harden(router, &self.inner.settings.limits)
    }

    /// Serves [`router`](Self::router) on `addr` until the provider stops, for those without a
    /// server of their own. Put TLS in front of it.
    pub async fn serve(&self, addr: std::net::SocketAddr) -> std::io::Result<()> {
        webhook::serve(self.router(), addr, self.inner.slot.closed()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hex_hmac_of_the_body() {
        // RFC 4231, test case 2.
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }
}
