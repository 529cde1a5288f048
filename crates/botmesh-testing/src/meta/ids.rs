//! Fresh ids in the shapes Meta gives them: WhatsApp's `wamid.…`, the Messenger Platform's
//! `m_…`, trace ids and handshake challenges. Each is random, so ids never repeat across
//! servers, as a test with several stand-ins or restarts expects.

use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

fn random_hex() -> String {
    Uuid::new_v4().simple().to_string()
}

/// A WhatsApp message id: `wamid.` and 32 uppercase hex digits.
pub(super) fn wamid() -> String {
    format!("wamid.{}", random_hex().to_ascii_uppercase())
}

/// A Messenger or Instagram message id: `m_` and 32 hex digits.
pub(super) fn mid() -> String {
    format!("m_{}", random_hex())
}

/// An `fbtrace_id`, as every error carries.
pub(super) fn fbtrace_id() -> String {
    let hex = random_hex();
    format!("A{}", &hex[..22])
}

/// A handshake challenge: ten random digits, as Meta sends.
pub(super) fn challenge() -> String {
    format!("{:010}", Uuid::new_v4().as_u128() % 10_000_000_000)
}

/// The time since the Unix epoch, in milliseconds (Messenger's `timestamp` and `time`).
pub(super) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time since the Unix epoch, in seconds (WhatsApp's `timestamp`).
pub(super) fn unix_secs() -> u64 {
    unix_millis() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_metas_shapes_and_do_not_repeat() {
        let (a, b) = (wamid(), wamid());
        assert!(a.starts_with("wamid.") && a.len() == 38, "{a}");
        assert_ne!(a, b);
        assert!(mid().starts_with("m_"));
        let c = challenge();
        assert!(c.len() == 10 && c.bytes().all(|b| b.is_ascii_digit()), "{c}");
        assert_eq!(fbtrace_id().len(), 23);
        assert!(unix_secs() > 1_700_000_000);
    }
}
