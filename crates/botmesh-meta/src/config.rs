//! [`MetaSettings`]: a Meta provider as a configuration file describes it.

use std::fmt;
use std::time::Duration;

use botmesh_traits::Result;
use botmesh_traits::webhook::Limits;
use serde::Deserialize;

use crate::{Channel, MetaProvider};

/// A Meta provider (one channel) as a configuration file describes it: the channel and its
/// account, the token and the two secrets, and the builder's settings with durations as text
/// (`"10s"`). Left out, a setting keeps the builder's default; an unknown key is an error.
/// [`provider`](Self::provider) makes the provider. `Debug` output leaves the token and the
/// secrets out.
///
/// ```toml
/// token = "EAAG..."
/// app_secret = "..."
/// verify_token = "..."
/// request_timeout = "10s"
///
/// [channel]
/// kind = "whatsapp"           # with phone_number_id; "messenger" with page_id;
/// phone_number_id = "1234"    # "instagram" with account_id
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MetaSettings {
    /// The channel, and the account it sends from.
    pub channel: Channel,
    /// The Graph API access token.
    pub token: String,
    /// The app secret, which checks webhook signatures.
    pub app_secret: String,
    /// The token that answers the verification handshake.
    pub verify_token: String,
    /// The provider's id (`whatsapp`, `messenger` or `instagram` by default).
    #[serde(default)]
    pub id: Option<String>,
    /// See [`MetaProvider::with_api_url`].
    #[serde(default)]
    pub api_url: Option<String>,
    /// The largest webhook body taken (see [`Limits::max_body_bytes`]).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// How long a webhook request may take (see [`Limits::timeout`]).
    #[serde(default, with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
}

impl fmt::Debug for MetaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token nor the secrets.
        f.debug_struct("MetaSettings")
            .field("channel", &self.channel)
            .field("id", &self.id)
            .field("api_url", &self.api_url)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl MetaSettings {
    /// The provider these settings describe. Fails only when the HTTP client cannot be built.
    pub fn provider(&self) -> Result<MetaProvider> {
        let mut provider = MetaProvider::new(
            self.channel.clone(),
            &self.token,
            &self.app_secret,
            &self.verify_token,
        )?;
        if let Some(id) = &self.id {
            provider = provider.with_id(id);
        }
        if let Some(url) = &self.api_url {
            provider = provider.with_api_url(url);
        }
        if self.max_body_bytes.is_some() || self.request_timeout.is_some() {
            let mut limits = Limits::new();
            if let Some(bytes) = self.max_body_bytes {
                limits = limits.max_body_bytes(bytes);
            }
            if let Some(timeout) = self.request_timeout {
                limits = limits.timeout(timeout);
            }
            provider = provider.with_limits(limits);
        }
        Ok(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRETS: &str =
        r#""token": "tok-s3cret", "app_secret": "app-s3cret", "verify_token": "v-s3cret""#;

    #[test]
    fn settings_from_a_config_file() {
        let s: MetaSettings = serde_json::from_str(&format!(
            r#"{{ "channel": {{ "kind": "whatsapp", "phone_number_id": "1234" }}, {SECRETS},
                 "request_timeout": "4s" }}"#
        ))
        .unwrap();
        assert_eq!(s.channel, Channel::WhatsApp { phone_number_id: "1234".to_owned() });
        assert!(!format!("{s:?}").contains("s3cret"), "Debug hides the token and the secrets");
        let provider = s.provider().unwrap();
        assert_eq!(provider.inner.id, "whatsapp");
        assert_eq!(provider.inner.limits.get_timeout(), Duration::from_secs(4));
        assert_eq!(provider.inner.limits.get_max_body_bytes(), Limits::new().get_max_body_bytes());

        let s: MetaSettings = serde_json::from_str(&format!(
            r#"{{ "channel": {{ "kind": "instagram", "account_id": "99" }}, {SECRETS}, "id": "ig" }}"#
        ))
        .unwrap();
        assert_eq!(s.channel, Channel::Instagram { account_id: "99".to_owned() });
        assert_eq!(s.provider().unwrap().inner.id, "ig");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let page = r#""channel": { "kind": "messenger", "page_id": "7" }"#;
        for bad in [
            format!(r#"{{ {page}, {SECRETS}, "request_timout": "4s" }}"#),
            format!(r#"{{ {page}, {SECRETS}, "request_timeout": 4 }}"#),
            format!(r#"{{ {page}, {SECRETS}, "request_timeout": "4 fortnights" }}"#),
            format!(r#"{{ "channel": {{ "kind": "messenger", "page": "7" }}, {SECRETS} }}"#),
            format!(
                r#"{{ "channel": {{ "kind": "messenger", "page_id": "7", "pgae_id": "8" }}, {SECRETS} }}"#
            ),
            format!(r#"{{ "channel": {{ "kind": "telegram", "page_id": "7" }}, {SECRETS} }}"#),
            format!(r#"{{ {page}, "token": "t" }}"#),
        ] {
            assert!(serde_json::from_str::<MetaSettings>(&bad).is_err(), "{bad}");
        }
    }
}
