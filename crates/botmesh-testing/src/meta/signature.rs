//! The webhook signature: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(app secret, body)>`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The header Meta signs each webhook delivery with.
pub const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";

/// The [`SIGNATURE_HEADER`] value for a body: `sha256=` and the lowercase hex HMAC-SHA256 of
/// the raw body bytes, keyed with the app secret. A receiver computes the same over the bytes
/// it got, before parsing them, and compares.
pub fn signature(app_secret: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length: longer ones are hashed first, so this never fails.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) else {
        unreachable!("HMAC accepts keys of any length");
    };
    mac.update(body);
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

/// The lowercase hex SHA-256 of bytes, as media metadata gives it.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_known_vectors() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xf0, 0xff]), "000ff0ff");
    }
}
