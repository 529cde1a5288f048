//! [`RedisOptions`] from a configuration file: the `serde` feature.

use std::time::Duration;

use serde::Deserialize;

use crate::{KeyLayout, RedisOptions};

/// [`RedisOptions`] as a configuration file writes them: `url` for one server or `cluster` for
/// the nodes of a Redis Cluster, `prefix`, and the builder's settings with durations as text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedisOptionsText {
    url: Option<String>,
    cluster: Option<Vec<String>>,
    prefix: String,
    layout: Option<KeyLayout>,
    #[serde(default, with = "humantime_serde")]
    connection_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    response_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    max_poll: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    idle_keep: Option<Duration>,
}

impl TryFrom<RedisOptionsText> for RedisOptions {
    type Error = &'static str;

    fn try_from(text: RedisOptionsText) -> Result<Self, Self::Error> {
        let mut options = match (text.url, text.cluster) {
            (Some(url), None) => Self::new(&url, &text.prefix),
            (None, Some(nodes)) if !nodes.is_empty() => Self::cluster(nodes, &text.prefix),
            (None, Some(_)) => return Err("`cluster` lists no node"),
            (None, None) => {
                return Err("give `url` (one server) or `cluster` (the nodes of a cluster)");
            }
            (Some(_), Some(_)) => return Err("give `url` or `cluster`, not both"),
        };
        if let Some(layout) = text.layout {
            options = options.layout(layout);
        }
        if let Some(t) = text.connection_timeout {
            options = options.connection_timeout(t);
        }
        if let Some(t) = text.response_timeout {
            options = options.response_timeout(t);
        }
        if let Some(t) = text.max_poll {
            options = options.max_poll(t);
        }
        if let Some(t) = text.idle_keep {
            options = options.idle_keep(t);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_a_config_file() {
        let o: RedisOptions = serde_json::from_str(
            r#"{ "url": "redis://bot:s3cret@10.0.0.1/0", "prefix": "shop",
                 "response_timeout": "1500ms", "idle_keep": "2m" }"#,
        )
        .unwrap();
        assert_eq!(o.urls, ["redis://bot:s3cret@10.0.0.1/0"]);
        assert_eq!(o.prefix, "shop");
        assert_eq!(o.response_timeout, Duration::from_millis(1500));
        assert_eq!(o.idle_keep, Duration::from_secs(120));
        assert_eq!(o.connection_timeout, Duration::from_secs(2), "left out: the default");
        assert_eq!(o.layout, KeyLayout::Standalone);
        assert!(!format!("{o:?}").contains("s3cret"), "Debug hides the password");

        let o: RedisOptions = serde_json::from_str(
            r#"{ "cluster": ["redis://10.0.0.1:7001", "redis://10.0.0.2:7002"], "prefix": "shop" }"#,
        )
        .unwrap();
        assert!(o.cluster);
        assert_eq!(o.layout, KeyLayout::Cluster);
        let o: RedisOptions =
            serde_json::from_str(r#"{ "url": "redis://h", "prefix": "p", "layout": "cluster" }"#)
                .unwrap();
        assert_eq!(o.layout, KeyLayout::Cluster);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let bad = [
            r#"{ "url": "redis://h", "prefix": "p", "respones_timeout": "1s" }"#,
            r#"{ "url": "redis://h", "prefix": "p", "response_timeout": 2 }"#,
            r#"{ "url": "redis://h", "prefix": "p", "response_timeout": "soon" }"#,
            r#"{ "url": "redis://h" }"#,
            r#"{ "prefix": "p" }"#,
            r#"{ "url": "redis://h", "cluster": ["redis://h"], "prefix": "p" }"#,
            r#"{ "url": "redis://h", "prefix": "p", "layout": "sharded" }"#,
        ];
        for text in bad {
            assert!(serde_json::from_str::<RedisOptions>(text).is_err(), "{text}");
        }
    }
}
