//! `X-Hub-Signature-256`: Meta signs each webhook body with the app secret.

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The header Meta signs webhook requests with.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// Whether `header` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under `secret`. The digest is
/// compared in constant time; a missing, malformed or empty-secret signature never matches.
pub(crate) fn verify(secret: &[u8], body: &[u8], header: Option<&[u8]>) -> bool {
    let Some(hex) = header.and_then(|h| h.strip_prefix(b"sha256=")) else { return false };
    let Some(expected) = decode_hex(hex) else { return false };
    if secret.is_empty() {
        return false;
    }
    let Ok(mut mac) = <Hmac>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

type Hmac = hmac::Hmac<Sha256>;

fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    hex.chunks(2).map(|pair| Some(digit(pair[0])? * 16 + digit(pair[1])?)).collect()
}

/// The signature Meta would send for `body` under `secret`, `sha256=<hex>`.
#[cfg(test)]
pub(crate) fn sign(secret: &[u8], body: &[u8]) -> String {
    use std::fmt::Write;
    let mut mac = <Hmac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("any key length"));
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    digest.iter().fold("sha256=".to_owned(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_matches_its_body_and_secret_only() {
        let body = br#"{"object":"page"}"#;
        let good = sign(b"app-secret", body);
        assert!(verify(b"app-secret", body, Some(good.as_bytes())));
        assert!(
            !verify(b"app-secret", br#"{"object":"pagE"}"#, Some(good.as_bytes())),
            "modified body"
        );
        assert!(!verify(b"other", body, Some(good.as_bytes())), "other secret");
        assert!(!verify(b"app-secret", body, None), "missing");
        assert!(!verify(b"app-secret", body, Some(b"sha256=zz")), "not hex");
        assert!(!verify(b"app-secret", body, Some(&good.as_bytes()[..20])), "cut short");
        assert!(!verify(b"", body, Some(sign(b"", body).as_bytes())), "no secret set");
        // A published vector: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
        let fox = sign(b"key", b"The quick brown fox jumps over the lazy dog");
        assert_eq!(fox, "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
    }
}
