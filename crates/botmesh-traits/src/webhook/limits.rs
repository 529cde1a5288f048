//! How large and how slow a webhook request may be.

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// The bounds [`harden`] puts on every request a webhook serves.
///
/// Built by value from [`Limits::new`]:
///
/// ```
/// use std::time::Duration;
/// use botmesh_traits::webhook::Limits;
///
/// let limits = Limits::new().max_body_bytes(64 * 1024).timeout(Duration::from_secs(5));
/// assert_eq!(limits.get_max_body_bytes(), 64 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_body_bytes: usize,
    timeout: Duration,
}

impl Limits {
    /// Bodies up to 1 MiB, answered within 10 seconds.
    pub const fn new() -> Self {
        Self { max_body_bytes: 1024 * 1024, timeout: Duration::from_secs(10) }
    }

    /// The largest request body taken, in bytes; larger ones are answered `413`.
    #[must_use]
    pub const fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long a request may take before it is answered `503`, so that the platform delivers
    /// it again. Keep it under the platform's own timeout.
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest request body taken, in bytes.
    pub const fn get_max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// How long a request may take.
    pub const fn get_timeout(&self) -> Duration {
        self.timeout
    }
}

impl Default for Limits {
    /// The same as [`Limits::new`].
    fn default() -> Self {
        Self::new()
    }
}

/// Bounds every route of `router` by `limits`: bodies larger than
/// [`max_body_bytes`](Limits::max_body_bytes) are answered `413 Payload Too Large`, and
/// requests slower than [`timeout`](Limits::timeout) `503 Service Unavailable`, so that the
/// platform delivers them again.
///
/// The body limit holds both for a declared `Content-Length` (refused before the handler
/// runs) and for a body that streams in without one, and it replaces axum's own default limit
/// for its body extractors. Routes added to the router afterwards are not bounded: call this
/// last.
pub fn harden(router: Router, limits: &Limits) -> Router {
    router
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, limits.timeout))
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, Bytes};
    use axum::http::Request;
    use axum::http::header::CONTENT_LENGTH;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    /// Answers how many bytes it read.
    async fn count(body: Bytes) -> String {
        body.len().to_string()
    }

    /// Reads the raw body, which axum's extractor limit does not cover; `400` if it cannot.
    async fn read_raw(body: Body) -> StatusCode {
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(_) => StatusCode::OK,
            Err(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// Answers after `delay` of the test's paused clock.
    fn slow(delay: Duration) -> Router {
        Router::new().route("/", post(move || async move { tokio::time::sleep(delay).await }))
    }

    async fn post_bytes(router: Router, len: usize, declared: bool) -> StatusCode {
        let mut request = Request::post("/");
        if declared {
            request = request.header(CONTENT_LENGTH, len);
        }
        let request = request.body(Body::from(vec![b'x'; len])).unwrap();
        router.oneshot(request).await.unwrap().status()
    }

    #[test]
    fn the_defaults_are_one_mebibyte_and_ten_seconds() {
        let limits = Limits::default();
        assert_eq!(limits, Limits::new());
        assert_eq!(limits.get_max_body_bytes(), 1_048_576);
        assert_eq!(limits.get_timeout(), Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_answered_413_with_or_without_its_length() {
        let router =
            harden(Router::new().route("/", post(count)), &Limits::new().max_body_bytes(16));
        for declared in [true, false] {
            assert_eq!(post_bytes(router.clone(), 16, declared).await, StatusCode::OK);
            assert_eq!(
                post_bytes(router.clone(), 17, declared).await,
                StatusCode::PAYLOAD_TOO_LARGE
            );
        }
    }

    #[tokio::test]
    async fn a_handler_reading_the_raw_body_is_bounded_too() {
        let router =
            harden(Router::new().route("/", post(read_raw)), &Limits::new().max_body_bytes(16));
        assert_eq!(post_bytes(router.clone(), 16, false).await, StatusCode::OK);
        // Refused before the handler runs.
        assert_eq!(post_bytes(router.clone(), 17, true).await, StatusCode::PAYLOAD_TOO_LARGE);
        // Cut off while the handler reads it.
        assert_eq!(post_bytes(router, 17, false).await, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn the_limit_replaces_axums_default_for_larger_bodies() {
        // axum's extractors refuse more than 2 MB unless told otherwise.
        let limits = Limits::new().max_body_bytes(3 * 1024 * 1024);
        let router = harden(Router::new().route("/", post(count)), &limits);
        let body = 5 * 1024 * 1024 / 2;
        assert_eq!(post_bytes(router.clone(), body, false).await, StatusCode::OK);
        assert_eq!(post_bytes(router, body, true).await, StatusCode::OK);
    }

    // The clock is paused: the 5 s handler and the 50 ms timeout run on virtual time, which
    // tokio advances to the next timer once nothing else can run. So the timeout fires first
    // on any machine, however slow, and the test takes no real time.
    #[tokio::test(start_paused = true)]
    async fn a_handler_slower_than_the_timeout_is_answered_503() {
        let limits = Limits::new().timeout(Duration::from_millis(50));
        let slow = harden(slow(Duration::from_secs(5)), &limits);
        assert_eq!(post_bytes(slow, 0, true).await, StatusCode::SERVICE_UNAVAILABLE);
        let quick = harden(self::slow(Duration::from_millis(10)), &limits);
        assert_eq!(post_bytes(quick, 0, true).await, StatusCode::OK);
    }
}
