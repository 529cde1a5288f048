//! The status page's optional token: a bearer token, or the password of HTTP Basic auth (what a
//! browser prompts for and sends again on each reload), compared in constant time.

use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use subtle::ConstantTimeEq;

/// Whether `headers` carry `token`.
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let given = if let Some(bearer) = value.strip_prefix("Bearer ") {
        bearer.trim().as_bytes().to_vec()
    } else if let Some(basic) = value.strip_prefix("Basic ") {
        let Ok(decoded) = STANDARD.decode(basic.trim()) else { return false };
        // `user:password`; the user is not checked.
        match decoded.iter().position(|b| *b == b':') {
            Some(colon) => decoded[colon + 1..].to_vec(),
            None => return false,
        }
    } else {
        return false;
    };
    bool::from(given.as_slice().ct_eq(token.as_bytes()))
}

/// The answer to a request without the token: a browser asks for it.
pub(crate) fn challenge() -> Response {
    let mut response = (StatusCode::UNAUTHORIZED, "a token is required\n").into_response();
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"botmesh\", charset=\"UTF-8\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).expect("a header value"));
        headers
    }

    #[test]
    fn bearer_and_basic_tokens_are_taken_and_wrong_ones_refused() {
        assert!(authorized(&with("Bearer s3cret"), "s3cret"));
        assert!(!authorized(&with("Bearer s3cre"), "s3cret"));
        assert!(!authorized(&with("Bearer s3cret2"), "s3cret"));
        let basic = STANDARD.encode("ops:s3cret");
        assert!(authorized(&with(&format!("Basic {basic}")), "s3cret"));
        let wrong = STANDARD.encode("s3cret:nope");
        assert!(!authorized(&with(&format!("Basic {wrong}")), "s3cret"));
        assert!(!authorized(&with("Basic !!!"), "s3cret"));
        assert!(!authorized(&with("Token s3cret"), "s3cret"));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }
}
