//! Comparing a platform's shared secret without leaking it through timing.

use subtle::ConstantTimeEq;

/// Whether `given`, the secret a request carries (a header such as Telegram's
/// `X-Telegram-Bot-Api-Secret-Token`), is `expected`.
///
/// The bytes are compared in constant time, so how long the answer takes tells a caller
/// nothing about how much of its guess was right; only a difference in length shows. A
/// missing secret never matches, and neither does anything when `expected` is empty: an
/// endpoint whose secret was left unset refuses every request rather than taking any.
///
/// Secrets are never logged: neither this function nor [`Rejection`](super::Rejection) puts
/// them, or the headers that carry them, in a log line, an error or a response.
pub fn secret_matches(given: Option<&[u8]>, expected: &[u8]) -> bool {
    match given {
        Some(given) if !expected.is_empty() => given.ct_eq(expected).into(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_expected_secret_matches() {
        let cases = [
            (Some("s3cret"), "s3cret", true),
            (Some("s3creT"), "s3cret", false),
            (Some("s3cre"), "s3cret", false),
            (Some("s3crets"), "s3cret", false),
            (Some(""), "s3cret", false),
            (None, "s3cret", false),
            (Some(""), "", false),
            (None, "", false),
        ];
        for (given, expected, matches) in cases {
            let answer = secret_matches(given.map(str::as_bytes), expected.as_bytes());
            assert_eq!(answer, matches, "{given:?} against {expected:?}");
        }
    }
}
