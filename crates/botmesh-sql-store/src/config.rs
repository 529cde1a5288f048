//! The options from a configuration file: the `serde` feature.
//!
//! Each options type reads from its own text form, which applies what the file gives through
//! the builder, so the defaults stay those of the constructors.

use std::time::Duration;

use serde::Deserialize;

/// [`PostgresOptions`](crate::PostgresOptions) or [`MySqlOptions`](crate::MySqlOptions) as a
/// file writes them.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerOptionsText {
    url: String,
    max_connections: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    acquire_timeout: Option<Duration>,
    migrate: Option<bool>,
}

#[cfg(feature = "postgres")]
impl From<ServerOptionsText> for crate::PostgresOptions {
    fn from(text: ServerOptionsText) -> Self {
        let mut options = Self::new(text.url);
        if let Some(n) = text.max_connections {
            options = options.max_connections(n);
        }
        if let Some(t) = text.acquire_timeout {
            options = options.acquire_timeout(t);
        }
        if let Some(yes) = text.migrate {
            options = options.migrate(yes);
        }
        options
    }
}

#[cfg(feature = "mysql")]
impl From<ServerOptionsText> for crate::MySqlOptions {
    fn from(text: ServerOptionsText) -> Self {
        let mut options = Self::new(text.url);
        if let Some(n) = text.max_connections {
            options = options.max_connections(n);
        }
        if let Some(t) = text.acquire_timeout {
            options = options.acquire_timeout(t);
        }
        if let Some(yes) = text.migrate {
            options = options.migrate(yes);
        }
        options
    }
}

/// [`SqliteOptions`](crate::SqliteOptions) as a file writes them: `path` (a file) or `url`
/// (`sqlite::memory:` for a database in memory).
#[cfg(feature = "sqlite")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SqliteOptionsText {
    path: Option<std::path::PathBuf>,
    url: Option<String>,
    #[serde(default, with = "humantime_serde")]
    busy_timeout: Option<Duration>,
    migrate: Option<bool>,
}

#[cfg(feature = "sqlite")]
impl TryFrom<SqliteOptionsText> for crate::SqliteOptions {
    type Error = &'static str;

    fn try_from(text: SqliteOptionsText) -> Result<Self, Self::Error> {
        let mut options = match (text.path, text.url) {
            (Some(path), None) => Self::file(path),
            (None, Some(url)) if url == "sqlite::memory:" => Self::in_memory(),
            (None, Some(url)) => Self::url(url),
            (None, None) => return Err("give `path` (a database file) or `url`"),
            (Some(_), Some(_)) => return Err("give `path` or `url`, not both"),
        };
        if let Some(t) = text.busy_timeout {
            options = options.busy_timeout(t);
        }
        if let Some(yes) = text.migrate {
            options = options.migrate(yes);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    #[allow(unused_imports, reason = "each backend's test uses part of them")]
    use super::*;

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_options_from_a_config_file() {
        let o: crate::PostgresOptions = serde_json::from_str(
            r#"{ "url": "postgres://bot:s3cret@db/shop", "acquire_timeout": "1m 30s", "max_connections": 20 }"#,
        )
        .unwrap();
        let shown = format!("{o:?}");
        assert!(shown.contains("acquire_timeout: 90s"), "{shown}");
        assert!(
            shown.contains("max_connections: 20") && shown.contains("migrate: true"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "Debug hides the password: {shown}");
        let o: crate::PostgresOptions = serde_json::from_str(
            r#"{ "url": "postgres://db/shop?user=bot&password=s3cret&sslmode=require" }"#,
        )
        .unwrap();
        let shown = format!("{o:?}");
        assert!(
            shown.contains("postgres://db/shop?user=bot&password=***&sslmode=require"),
            "{shown}"
        );
        for bad in [
            r#"{ "url": "postgres://db", "max_conections": 20 }"#,
            r#"{ "url": "postgres://db", "acquire_timeout": 5 }"#,
            r#"{ "max_connections": 20 }"#,
        ] {
            assert!(serde_json::from_str::<crate::PostgresOptions>(bad).is_err(), "{bad}");
        }
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_options_from_a_config_file() {
        let o: crate::MySqlOptions =
            serde_json::from_str(r#"{ "url": "mysql://root@db/test", "migrate": false }"#).unwrap();
        let shown = format!("{o:?}");
        assert!(
            shown.contains("acquire_timeout: 5s") && shown.contains("migrate: false"),
            "{shown}"
        );
        assert!(
            serde_json::from_str::<crate::MySqlOptions>(r#"{ "url": "mysql://db", "pool": 3 }"#)
                .is_err()
        );
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_options_from_a_config_file() {
        let o: crate::SqliteOptions =
            serde_json::from_str(r#"{ "path": "shop.db", "busy_timeout": "250ms" }"#).unwrap();
        let shown = format!("{o:?}");
        assert!(shown.contains("sqlite://shop.db") && shown.contains("250ms"), "{shown}");
        let o: crate::SqliteOptions =
            serde_json::from_str(r#"{ "url": "sqlite::memory:" }"#).unwrap();
        assert!(format!("{o:?}").contains("max_connections: 1"));
        for bad in [
            r#"{ "path": "shop.db", "busy_timout": "1s" }"#,
            r#"{ "path": "shop.db", "busy_timeout": "a while" }"#,
            r#"{ "path": "shop.db", "url": "sqlite://other.db" }"#,
            r#"{}"#,
        ] {
            assert!(serde_json::from_str::<crate::SqliteOptions>(bad).is_err(), "{bad}");
        }
    }
}
