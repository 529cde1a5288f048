//! [`OpsSettings`]: the operations routes as a configuration file describes them.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::Ops;

/// The operations routes as a configuration file describes them; [`apply`](Self::apply) sets
/// them on an [`Ops`]. Left out, a setting keeps [`Ops::new`]'s default; an unknown key is an
/// error. `Debug` output leaves the token out.
///
/// ```toml
/// status_page = true
/// token = "s3cret"      # required for the status page and the metrics
/// refresh = "5s"
/// ```
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct OpsSettings {
    /// Serves the status page (see [`Ops::status_page`]).
    pub status_page: bool,
    /// See [`Ops::token`].
    pub token: Option<String>,
    /// See [`Ops::refresh`].
    #[serde(with = "humantime_serde")]
    pub refresh: Option<Duration>,
}

impl fmt::Debug for OpsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: only whether there is one.
        f.debug_struct("OpsSettings")
            .field("status_page", &self.status_page)
            .field("token", &self.token.is_some())
            .field("refresh", &self.refresh)
            .finish()
    }
}

impl OpsSettings {
    /// `ops` with these settings.
    pub fn apply(&self, mut ops: Ops) -> Ops {
        if self.status_page {
            ops = ops.status_page();
        }
        if let Some(token) = &self.token {
            ops = ops.token(token.as_str());
        }
        if let Some(every) = self.refresh {
            ops = ops.refresh(every);
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use botmesh_core::Bot;
    use botmesh_testing::TestProvider;

    use super::*;

    #[test]
    fn settings_from_a_config_file() {
        let s: OpsSettings =
            serde_json::from_str(r#"{ "status_page": true, "token": "s3cret", "refresh": "5s" }"#)
                .unwrap();
        assert!(!format!("{s:?}").contains("s3cret"), "Debug hides the token");
        let bot = Bot::builder().provider(TestProvider::new()).build().unwrap();
        let ops = s.apply(Ops::new(bot.clone()));
        assert!(ops.status_page);
        assert_eq!(ops.token.as_deref(), Some("s3cret"));
        assert_eq!(ops.refresh, Duration::from_secs(5));
        let ops = OpsSettings::default().apply(Ops::new(bot));
        assert!(!ops.status_page && ops.token.is_none());
        assert_eq!(ops.refresh, Duration::from_secs(2), "left out: the default");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for bad in [r#"{ "status": true }"#, r#"{ "refresh": 5 }"#, r#"{ "refresh": "often" }"#] {
            assert!(serde_json::from_str::<OpsSettings>(bad).is_err(), "{bad}");
        }
    }
}
