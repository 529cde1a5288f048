//! [`MongoOptions`] from a configuration file: the `serde` feature.

use std::time::Duration;

use serde::Deserialize;

use crate::MongoOptions;

/// [`MongoOptions`] as a configuration file writes them: `url`, and the builder's settings
/// with durations as text. What the file gives goes through the builder, so the defaults stay
/// those of [`MongoOptions::new`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MongoOptionsText {
    url: String,
    database: Option<String>,
    collection_prefix: Option<String>,
    max_pool_size: Option<u32>,
    min_pool_size: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    server_selection_timeout: Option<Duration>,
    app_name: Option<String>,
    migrate: Option<bool>,
}

impl From<MongoOptionsText> for MongoOptions {
    fn from(text: MongoOptionsText) -> Self {
        let mut options = Self::new(text.url);
        if let Some(name) = text.database {
            options = options.database(name);
        }
        if let Some(prefix) = text.collection_prefix {
            options = options.collection_prefix(prefix);
        }
        if let Some(n) = text.max_pool_size {
            options = options.max_pool_size(n);
        }
        if let Some(n) = text.min_pool_size {
            options = options.min_pool_size(n);
        }
        if let Some(t) = text.connect_timeout {
            options = options.connect_timeout(t);
        }
        if let Some(t) = text.server_selection_timeout {
            options = options.server_selection_timeout(t);
        }
        if let Some(name) = text.app_name {
            options = options.app_name(name);
        }
        if let Some(yes) = text.migrate {
            options = options.migrate(yes);
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_a_config_file() {
        let o: MongoOptions = serde_json::from_str(
            r#"{ "url": "mongodb://bot:s3cret@db:27017/?replicaSet=rs0", "database": "shop",
                 "connect_timeout": "3s", "server_selection_timeout": "1m" }"#,
        )
        .unwrap();
        assert_eq!(o.get_url(), "mongodb://bot:s3cret@db:27017/?replicaSet=rs0");
        assert_eq!(o.database.as_deref(), Some("shop"));
        assert_eq!(o.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(o.server_selection_timeout, Some(Duration::from_secs(60)));
        assert_eq!(o.get_collection_prefix(), "botmesh_", "left out: the default");
        assert!(o.migrate);
        assert!(!format!("{o:?}").contains("s3cret"), "Debug hides the password");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        for bad in [
            r#"{ "url": "mongodb://db", "databse": "shop" }"#,
            r#"{ "url": "mongodb://db", "connect_timeout": 3 }"#,
            r#"{ "url": "mongodb://db", "connect_timeout": "3 parsecs" }"#,
            r#"{ "database": "shop" }"#,
        ] {
            assert!(serde_json::from_str::<MongoOptions>(bad).is_err(), "{bad}");
        }
    }
}
