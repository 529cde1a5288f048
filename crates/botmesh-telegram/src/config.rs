//! [`TelegramSettings`]: a Telegram provider as a configuration file describes it.

use std::fmt;
use std::time::Duration;

use botmesh_traits::webhook::Limits;
use botmesh_traits::{BoxError, Error, Result};
use serde::Deserialize;

use crate::{ParseMode, TelegramProvider};

/// A Telegram provider as a configuration file describes it: the token, webhooks or long
/// polling, and the builder's settings with durations as text (`"10s"`). Left out, a setting
/// keeps the builder's default; an unknown key is an error. [`provider`](Self::provider)
/// makes the provider. `Debug` output leaves the token and the webhook secret out.
///
/// ```toml
/// token = "123:abc"
/// parse_mode = "HTML"        # or "MarkdownV2"; plain text when left out
/// poll_timeout = "10s"       # long polling, without a [webhook] table
///
/// [webhook]                  # webhooks instead of long polling
/// url = "https://bot.example.org/telegram"
/// secret = "s3cret"
/// timeout = "10s"
/// max_body_bytes = 1048576
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelegramSettings {
    /// The bot token.
    pub token: String,
    /// The provider's id (`telegram` by default).
    #[serde(default)]
    pub id: Option<String>,
    /// Another Bot API server, for [`TelegramProvider::with_api_url`].
    #[serde(default)]
    pub api_url: Option<String>,
    /// See [`TelegramProvider::with_parse_mode`]: `"HTML"` or `"MarkdownV2"`.
    #[serde(default)]
    pub parse_mode: Option<ParseMode>,
    /// See [`TelegramProvider::with_poll_timeout`] (long polling only).
    #[serde(default, with = "humantime_serde")]
    pub poll_timeout: Option<Duration>,
    /// Webhooks instead of long polling.
    #[serde(default)]
    pub webhook: Option<TelegramWebhook>,
}

/// The webhook of [`TelegramSettings`]: see [`TelegramProvider::webhook`].
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelegramWebhook {
    /// The public HTTPS URL Telegram posts to.
    pub url: String,
    /// The secret Telegram sends in the `X-Telegram-Bot-Api-Secret-Token` header.
    pub secret: String,
    /// The largest request body taken (see [`Limits::max_body_bytes`]).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// How long a request may take (see [`Limits::timeout`]).
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
}

impl fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token.
        f.debug_struct("TelegramSettings")
            .field("id", &self.id)
            .field("api_url", &self.api_url)
            .field("parse_mode", &self.parse_mode)
            .field("poll_timeout", &self.poll_timeout)
            .field("webhook", &self.webhook)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for TelegramWebhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("TelegramWebhook")
            .field("url", &self.url)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn url(what: &str, text: &str) -> Result<url::Url> {
    text.parse().map_err(|e| {
        Error::Configuration(BoxError::from(format!("telegram: {what} {text:?} is not a URL: {e}")))
    })
}

impl TelegramSettings {
    /// The provider these settings describe. Fails with [`Error::Configuration`] when a URL
    /// does not parse.
    pub fn provider(&self) -> Result<TelegramProvider> {
        let mut provider = match &self.webhook {
            Some(hook) => {
                let mut limits = Limits::new();
                if let Some(bytes) = hook.max_body_bytes {
                    limits = limits.max_body_bytes(bytes);
                }
                if let Some(timeout) = hook.timeout {
                    limits = limits.timeout(timeout);
                }
                TelegramProvider::webhook(&self.token, url("webhook.url", &hook.url)?, &hook.secret)
                    .with_limits(limits)
            }
            None => TelegramProvider::polling(&self.token),
        };
        if let Some(id) = &self.id {
            provider = provider.with_id(id);
        }
        if let Some(api) = &self.api_url {
            provider = provider.with_api_url(url("api_url", api)?);
        }
        if let Some(mode) = self.parse_mode {
            provider = provider.with_parse_mode(mode);
        }
        if let Some(timeout) = self.poll_timeout {
            provider = provider.with_poll_timeout(timeout);
        }
        Ok(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Mode;

    #[test]
    fn settings_from_a_config_file() {
        let s: TelegramSettings = serde_json::from_str(
            r#"{ "token": "123:s3cret", "parse_mode": "HTML", "poll_timeout": "25s" }"#,
        )
        .unwrap();
        assert_eq!(s.poll_timeout, Some(Duration::from_secs(25)));
        assert!(!format!("{s:?}").contains("s3cret"), "Debug hides the token");
        let provider = s.provider().unwrap();
        let settings = provider.inner.settings();
        assert!(
            matches!(settings.mode, Mode::Polling { timeout } if timeout == Duration::from_secs(25))
        );
        assert_eq!(settings.parse_mode, Some(ParseMode::Html));

        let s: TelegramSettings = serde_json::from_str(
            r#"{ "token": "123:abc", "id": "tg",
                 "webhook": { "url": "https://bot.example.org/tg", "secret": "hush", "timeout": "5s" } }"#,
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("hush"), "Debug hides the secret");
        let provider = s.provider().unwrap();
        let settings = provider.inner.settings();
        assert_eq!(settings.id, "tg");
        assert!(matches!(settings.mode, Mode::Webhook { .. }));
        assert_eq!(settings.limits.get_timeout(), Duration::from_secs(5));
        assert_eq!(settings.limits.get_max_body_bytes(), Limits::new().get_max_body_bytes());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for bad in [
            r#"{ "token": "1:a", "poll_timeot": "25s" }"#,
            r#"{ "token": "1:a", "poll_timeout": 25 }"#,
            r#"{ "token": "1:a", "parse_mode": "markdown-ish" }"#,
            r#"{ "token": "1:a", "webhook": { "url": "https://x", "secret": "s", "path": "/" } }"#,
            r#"{ "poll_timeout": "25s" }"#,
        ] {
            assert!(serde_json::from_str::<TelegramSettings>(bad).is_err(), "{bad}");
        }
        let s: TelegramSettings =
            serde_json::from_str(r#"{ "token": "1:a", "api_url": "not a url" }"#).unwrap();
        assert!(s.provider().is_err());
    }
}
