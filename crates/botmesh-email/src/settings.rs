//! The provider from a configuration file: the `serde` feature. [`EmailSettings`] puts a whole
//! provider together; [`ImapConfig`] and [`SmtpConfig`] read from their text forms in
//! `config.rs`.

use std::fmt;
use std::time::Duration;

use botmesh_traits::webhook::Limits;
use serde::Deserialize;

use crate::{EmailProvider, ImapConfig, SmtpConfig, Threading};

/// An e-mail provider as a configuration file describes it: `imap` or `ingest` for the way in,
/// `smtp` for the way out, and the builder's settings with durations as text (`"7days"`).
/// Left out, a setting keeps the builder's default; an unknown key is an error.
/// [`provider`](Self::provider) makes the provider. `Debug` output leaves passwords and the
/// ingest secret out.
///
/// ```toml
/// threading = "thread"             # or "correspondent", the default
/// retention = "7days"
///
/// [imap]                           # or [ingest], for a mail service that posts raw mails
/// host = "imap.example.org"
/// user = "shop@example.org"
/// password = "s3cret"
/// idle_timeout = "10m"
///
/// [smtp]
/// host = "smtp.example.org"
/// from = "shop@example.org"
/// user = "shop@example.org"
/// password = "s3cret"
/// security = "starttls"            # "tls", "starttls" or "plain"
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EmailSettings {
    /// The provider's id (`email` by default).
    #[serde(default)]
    pub id: Option<String>,
    /// The mailbox read over IMAP: see [`EmailProvider::imap`].
    #[serde(default)]
    pub imap: Option<ImapConfig>,
    /// The ingest endpoint: see [`EmailProvider::ingest`].
    #[serde(default)]
    pub ingest: Option<EmailIngest>,
    /// Where replies are sent from.
    pub smtp: SmtpConfig,
    /// See [`EmailProvider::with_threading`]: `"correspondent"` or `"thread"`.
    #[serde(default)]
    pub threading: Option<Threading>,
    /// See [`EmailProvider::with_retention`].
    #[serde(default, with = "humantime_serde")]
    pub retention: Option<Duration>,
    /// See [`EmailProvider::with_stop_timeout`].
    #[serde(default, with = "humantime_serde")]
    pub stop_timeout: Option<Duration>,
}

/// The ingest endpoint of [`EmailSettings`]: `secret` (sent as is in
/// [`SECRET_HEADER`](crate::SECRET_HEADER)) or `hmac_key` (a signature of each body, see
/// [`EmailProvider::with_hmac`]).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EmailIngest {
    /// The shared secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// The HMAC key, instead of a secret.
    #[serde(default)]
    pub hmac_key: Option<String>,
    /// See [`EmailProvider::with_path`].
    #[serde(default)]
    pub path: Option<String>,
    /// The largest request body taken (see [`Limits::max_body_bytes`]).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// How long a request may take (see [`Limits::timeout`]).
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
}

impl fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configs' and the ingest's own `Debug` leave their secrets out.
        f.debug_struct("EmailSettings")
            .field("id", &self.id)
            .field("imap", &self.imap)
            .field("ingest", &self.ingest)
            .field("smtp", &self.smtp)
            .field("threading", &self.threading)
            .field("retention", &self.retention)
            .field("stop_timeout", &self.stop_timeout)
            .finish()
    }
}

impl fmt::Debug for EmailIngest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret nor the key.
        f.debug_struct("EmailIngest")
            .field("hmac", &self.hmac_key.is_some())
            .field("path", &self.path)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn configuration(msg: &str) -> botmesh_traits::Error {
    botmesh_traits::Error::Configuration(format!("email: {msg}").into())
}

impl EmailSettings {
    /// The provider these settings describe. Fails with
    /// [`Error::Configuration`](botmesh_traits::Error::Configuration) unless exactly one of
    /// `imap` and `ingest` is given, and unless an ingest has exactly one of `secret` and
    /// `hmac_key`.
    pub fn provider(&self) -> botmesh_traits::Result<EmailProvider> {
        let smtp = self.smtp.clone();
        let mut provider = match (&self.imap, &self.ingest) {
            (Some(imap), None) => EmailProvider::imap(imap.clone(), smtp),
            (None, Some(ingest)) => {
                let mut limits = Limits::new().max_body_bytes(10 * 1024 * 1024);
                if let Some(bytes) = ingest.max_body_bytes {
                    limits = limits.max_body_bytes(bytes);
                }
                if let Some(timeout) = ingest.timeout {
                    limits = limits.timeout(timeout);
                }
                let provider = match (&ingest.secret, &ingest.hmac_key) {
                    (Some(secret), None) => EmailProvider::ingest(secret, smtp),
                    (None, Some(key)) => EmailProvider::ingest(key, smtp).with_hmac(key),
                    _ => return Err(configuration("give the ingest `secret` or `hmac_key`")),
                };
                let provider = provider.with_limits(limits);
                match &ingest.path {
                    Some(path) => provider.with_path(path),
                    None => provider,
                }
            }
            (None, None) => return Err(configuration("give `imap` or `ingest`")),
            (Some(_), Some(_)) => return Err(configuration("give `imap` or `ingest`, not both")),
        };
        if let Some(id) = &self.id {
            provider = provider.with_id(id);
        }
        if let Some(threading) = self.threading {
            provider = provider.with_threading(threading);
        }
        if let Some(retention) = self.retention {
            provider = provider.with_retention(retention);
        }
        if let Some(timeout) = self.stop_timeout {
            provider = provider.with_stop_timeout(timeout);
        }
        Ok(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Check, Mode};
    use crate::{Backlog, Security};

    const SMTP: &str = r#""smtp": { "host": "smtp.example.org", "from": "shop@example.org",
        "user": "shop", "password": "smtp-s3cret", "timeout": "45s" }"#;

    #[test]
    fn settings_from_a_config_file() {
        let text = format!(
            r#"{{ "threading": "thread", "retention": "3days",
                 "imap": {{ "host": "imap.example.org", "user": "shop", "password": "imap-s3cret",
                           "security": "plain", "port": 143, "idle_timeout": "5m",
                           "stall_timeout": "20s", "backlog": "skip" }},
                 {SMTP} }}"#
        );
        let s: EmailSettings = serde_json::from_str(&text).unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "Debug hides the passwords: {shown}");
        let imap = s.imap.as_ref().unwrap();
        assert_eq!((imap.port, imap.security, imap.backlog), (143, Security::Plain, Backlog::Skip));
        assert_eq!(imap.idle_timeout, Duration::from_secs(300));
        assert_eq!(imap.stall_timeout, Duration::from_secs(20));
        assert_eq!(imap.poll_interval, Duration::from_secs(30), "left out: the default");
        assert_eq!(s.smtp.timeout, Duration::from_secs(45));
        assert_eq!(s.smtp.security, Security::StartTls, "left out: the default");
        assert!(s.smtp.credentials.is_some());
        let provider = s.provider().unwrap();
        let settings = &provider.inner.settings;
        assert_eq!(settings.threading, Threading::Thread);
        assert_eq!(settings.retention, Duration::from_secs(3 * 24 * 3600));
        assert!(matches!(settings.mode, Mode::Imap(_)));

        let text = format!(
            r#"{{ "ingest": {{ "hmac_key": "k", "path": "/mail", "timeout": "20s" }}, {SMTP} }}"#
        );
        let s: EmailSettings = serde_json::from_str(&text).unwrap();
        let provider = s.provider().unwrap();
        let settings = &provider.inner.settings;
        assert!(
            matches!(&settings.mode, Mode::Ingest { check: Check::Hmac(_), path } if path == "/mail")
        );
        assert_eq!(settings.limits.get_timeout(), Duration::from_secs(20));
        assert_eq!(settings.limits.get_max_body_bytes(), 10 * 1024 * 1024, "the ingest default");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let imap = r#""imap": { "host": "h", "user": "u", "password": "p" }"#;
        for bad in [
            format!(r#"{{ {imap}, {SMTP}, "retenton": "3days" }}"#),
            format!(r#"{{ {imap}, {SMTP}, "retention": 3 }}"#),
            format!(
                r#"{{ "imap": {{ "host": "h", "user": "u", "password": "p", "idle": "5m" }}, {SMTP} }}"#
            ),
            format!(
                r#"{{ "imap": {{ "host": "h", "user": "u", "password": "p", "security": "ssl" }}, {SMTP} }}"#
            ),
            format!(r#"{{ {imap}, "smtp": {{ "host": "h", "from": "f", "user": "u" }} }}"#),
            format!(r#"{{ {imap} }}"#),
        ] {
            assert!(serde_json::from_str::<EmailSettings>(&bad).is_err(), "{bad}");
        }
        for unusable in [
            format!(r#"{{ {SMTP} }}"#),
            format!(r#"{{ {imap}, "ingest": {{ "secret": "s" }}, {SMTP} }}"#),
            format!(r#"{{ "ingest": {{ "secret": "s", "hmac_key": "k" }}, {SMTP} }}"#),
        ] {
            let s: EmailSettings = serde_json::from_str(&unusable).unwrap();
            assert!(s.provider().is_err(), "{unusable}");
        }
    }
}
