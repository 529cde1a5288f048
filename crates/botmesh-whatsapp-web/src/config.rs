//! [`WhatsAppWebSettings`]: a WhatsApp Web provider as a configuration file describes it.

use std::time::Duration;

use serde::Deserialize;

use crate::{Session, WhatsAppWebProvider};

/// A WhatsApp Web provider as a configuration file describes it: where the session lives,
/// and the builder's settings with durations as text (`"15s"`). Left out, a setting keeps the
/// builder's default; an unknown key is an error. [`provider`](Self::provider) makes the
/// provider on whatsapp-rust; [`apply`](Self::apply) sets a provider made otherwise (with a
/// connector of your own).
///
/// ```toml
/// session = { dir = "/var/lib/bot/whatsapp" }   # or session = "store"
/// pair_code = "34600000000"                     # a pairing code instead of a QR code
/// session_lock_ttl = "15s"
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WhatsAppWebSettings {
    /// Where the session's keys live: `{ dir = "/path" }` or `"store"`.
    pub session: Session,
    /// The provider's id (`whatsapp-web` by default).
    #[serde(default)]
    pub id: Option<String>,
    /// See [`WhatsAppWebProvider::with_pair_code`]: the bot's phone number.
    #[serde(default)]
    pub pair_code: Option<String>,
    /// See [`WhatsAppWebProvider::with_intake_patience`].
    #[serde(default, with = "humantime_serde")]
    pub intake_patience: Option<Duration>,
    /// See [`WhatsAppWebProvider::with_session_lock_ttl`].
    #[serde(default, with = "humantime_serde")]
    pub session_lock_ttl: Option<Duration>,
    /// See [`WhatsAppWebProvider::with_session_lock_wait`].
    #[serde(default, with = "humantime_serde")]
    pub session_lock_wait: Option<Duration>,
}

impl WhatsAppWebSettings {
    /// The provider these settings describe, on whatsapp-rust.
    #[cfg(feature = "whatsapp-rust")]
    pub fn provider(&self) -> WhatsAppWebProvider {
        self.apply(WhatsAppWebProvider::new(self.session.clone()))
    }

    /// `provider` with these settings, all but the session, which it keeps.
    pub fn apply(&self, mut provider: WhatsAppWebProvider) -> WhatsAppWebProvider {
        if let Some(id) = &self.id {
            provider = provider.with_id(id);
        }
        if let Some(phone) = &self.pair_code {
            provider = provider.with_pair_code(phone);
        }
        if let Some(patience) = self.intake_patience {
            provider = provider.with_intake_patience(patience);
        }
        if let Some(ttl) = self.session_lock_ttl {
            provider = provider.with_session_lock_ttl(ttl);
        }
        if let Some(wait) = self.session_lock_wait {
            provider = provider.with_session_lock_wait(wait);
        }
        provider
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::seam::{WaConnector, WaOpen, WaPairing, WaSession};

    struct Nowhere;

    #[botmesh_traits::async_trait]
    impl WaConnector for Nowhere {
        async fn open(&self, _: WaOpen) -> crate::Result<WaSession> {
            Err(crate::Error::NotConnected)
        }
    }

    #[test]
    fn settings_from_a_config_file() {
        let s: WhatsAppWebSettings = serde_json::from_str(
            r#"{ "session": { "dir": "/var/lib/wa" }, "pair_code": "34600000000",
                 "session_lock_ttl": "20s", "intake_patience": "1m" }"#,
        )
        .unwrap();
        assert_eq!(s.session.dir(), Some(Path::new("/var/lib/wa")));
        let provider = s.apply(WhatsAppWebProvider::with_connector(s.session.clone(), Nowhere));
        let settings = &provider.inner.settings;
        assert_eq!(settings.lock_ttl, Duration::from_secs(20));
        assert_eq!(settings.patience, Duration::from_secs(60));
        assert_eq!(settings.lock_wait, Duration::from_secs(15), "left out: the default");
        assert!(matches!(&settings.pairing, WaPairing::Code { phone } if phone == "34600000000"));

        let s: WhatsAppWebSettings = serde_json::from_str(r#"{ "session": "store" }"#).unwrap();
        assert!(s.session.in_store());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for bad in [
            r#"{ "session": "store", "session_lock_tll": "20s" }"#,
            r#"{ "session": "store", "session_lock_ttl": 20 }"#,
            r#"{ "session": "store", "session_lock_ttl": "twenty seconds" }"#,
            r#"{ "session": "redis" }"#,
            r#"{ "id": "wa" }"#,
        ] {
            assert!(serde_json::from_str::<WhatsAppWebSettings>(bad).is_err(), "{bad}");
        }
    }
}
