//! A [`Verdict`] is the answer a webhook gives its platform.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::Verdict;

/// [`Verdict::status`] with the verdict's word as a plain-text body (`queued`, `unavailable`).
impl IntoResponse for Verdict {
    fn into_response(self) -> Response {
        word(self.status(), self.as_str())
    }
}

/// A response of `status` with `word` as its plain-text body: how verdicts and rejections
/// answer.
pub(super) fn word(status: u16, word: &'static str) -> Response {
    // Every status a verdict or a rejection names is a valid one; the fallback only keeps
    // this total.
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, word).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_verdict_answers_its_status_and_its_word() {
        let verdicts = [
            Verdict::Queued,
            Verdict::Duplicate,
            Verdict::Unavailable,
            Verdict::TooLarge,
            Verdict::Invalid,
        ];
        let mut answers = Vec::new();
        for verdict in verdicts {
            let response = verdict.into_response();
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
            answers.push((status, String::from_utf8(body.to_vec()).unwrap()));
        }
        let expected = [
            (200, "queued"),
            (200, "duplicate"),
            (503, "unavailable"),
            (413, "too_large"),
            (400, "invalid"),
        ];
        assert_eq!(answers, expected.map(|(s, b)| (s, b.to_owned())));
    }
}
