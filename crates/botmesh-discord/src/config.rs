//! [`DiscordSettings`]: a Discord provider as a configuration file describes it.

use std::fmt;
use std::time::Duration;

use botmesh_traits::{BoxError, Error, Result};
use serde::Deserialize;

use crate::{DiscordProvider, GatewayIntents};

/// A Discord provider as a configuration file describes it: the token, the gateway intents,
/// and the builder's settings with durations as text (`"1s"`). Left out, a setting keeps the
/// builder's default; an unknown key is an error. [`provider`](Self::provider) makes the
/// provider. `Debug` output leaves the token out.
///
/// ```toml
/// token = "MTA..."
/// # The intents by name; DiscordProvider::default_intents() when left out.
/// intents = ["GUILD_MESSAGES", "DIRECT_MESSAGES", "MESSAGE_CONTENT"]
/// close_timeout = "1s"
/// queue_limit = 1024
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DiscordSettings {
    /// The bot token (with or without its `Bot ` prefix).
    pub token: String,
    /// The gateway intents by name (`GUILD_MESSAGES`, `MESSAGE_CONTENT`, ...);
    /// [`DiscordProvider::default_intents`] when left out.
    #[serde(default)]
    pub intents: Option<Vec<String>>,
    /// The provider's id (`discord` by default).
    #[serde(default)]
    pub id: Option<String>,
    /// See [`DiscordProvider::with_proxy`].
    #[serde(default)]
    pub proxy: Option<String>,
    /// See [`DiscordProvider::with_close_timeout`].
    #[serde(default, with = "humantime_serde")]
    pub close_timeout: Option<Duration>,
    /// See [`DiscordProvider::with_queue_limit`].
    #[serde(default)]
    pub queue_limit: Option<usize>,
}

impl fmt::Debug for DiscordSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token.
        f.debug_struct("DiscordSettings")
            .field("intents", &self.intents)
            .field("id", &self.id)
            .field("proxy", &self.proxy)
            .field("close_timeout", &self.close_timeout)
            .field("queue_limit", &self.queue_limit)
            .finish_non_exhaustive()
    }
}

impl DiscordSettings {
    /// The provider these settings describe. Fails with [`Error::Configuration`] on an intent
    /// name Discord does not have.
    pub fn provider(&self) -> Result<DiscordProvider> {
        let intents = match &self.intents {
            None => DiscordProvider::default_intents(),
            Some(names) => names.iter().try_fold(GatewayIntents::empty(), |all, name| {
                GatewayIntents::from_name(name).map(|one| all | one).ok_or_else(|| {
                    Error::Configuration(BoxError::from(format!(
                        "discord: no gateway intent is named {name:?}"
                    )))
                })
            })?,
        };
        let mut provider = DiscordProvider::new(&self.token, intents);
        if let Some(id) = &self.id {
            provider = provider.with_id(id);
        }
        if let Some(proxy) = &self.proxy {
            provider = provider.with_proxy(proxy);
        }
        if let Some(timeout) = self.close_timeout {
            provider = provider.with_close_timeout(timeout);
        }
        if let Some(events) = self.queue_limit {
            provider = provider.with_queue_limit(events);
        }
        Ok(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_a_config_file() {
        let s: DiscordSettings = serde_json::from_str(
            r#"{ "token": "Bot s3cret", "intents": ["DIRECT_MESSAGES", "MESSAGE_CONTENT"],
                 "close_timeout": "750ms", "queue_limit": 10 }"#,
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("s3cret"), "Debug hides the token");
        let provider = s.provider().unwrap();
        let settings = &provider.inner.settings;
        assert_eq!(
            settings.intents,
            GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT
        );
        assert_eq!(settings.close_timeout, Duration::from_millis(750));
        assert_eq!(settings.queue_limit, 10);
        assert_eq!(settings.id, "discord", "left out: the default");

        let s: DiscordSettings = serde_json::from_str(r#"{ "token": "t" }"#).unwrap();
        assert_eq!(
            s.provider().unwrap().inner.settings.intents,
            DiscordProvider::default_intents()
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for bad in [
            r#"{ "token": "t", "close_timout": "1s" }"#,
            r#"{ "token": "t", "close_timeout": 1 }"#,
            r#"{ "token": "t", "close_timeout": "a second" }"#,
            r#"{ "intents": [] }"#,
        ] {
            assert!(serde_json::from_str::<DiscordSettings>(bad).is_err(), "{bad}");
        }
        let s: DiscordSettings =
            serde_json::from_str(r#"{ "token": "t", "intents": ["GUILD_MESAGES"] }"#).unwrap();
        assert!(s.provider().is_err());
    }
}
