//! [`RedisOptions`] from a configuration file: the `serde` feature.

use std::time::Duration;

use serde::Deserialize;

use crate::{KeyLayout, RedisOptions};

/// [`RedisOptions`] as a configuration file writes them: `url` for one server (or a
/// `redis+sentinel://` URL), `cluster` for the nodes of a Redis Cluster or `sentinel` for the
/// sentinels of a Redis they fail over, `prefix`, and the builder's settings with durations as
/// text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedisOptionsText {
    url: Option<String>,
    cluster: Option<Vec<String>>,
    sentinel: Option<SentinelText>,
    prefix: String,
    wait_for_replicas: Option<WaitText>,
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

/// `sentinel = { nodes = ["host:port", ...], master = "mymaster" }`, with the data nodes'
/// `password`, the sentinels' own `sentinel_password`, and `tls` (both) if needed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SentinelText {
    nodes: Vec<String>,
    master: String,
    password: Option<String>,
    sentinel_password: Option<String>,
    #[serde(default)]
    tls: bool,
}

/// `wait_for_replicas = { replicas = 1, timeout = "500ms" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitText {
    replicas: u32,
    #[serde(with = "humantime_serde")]
    timeout: Duration,
}

impl TryFrom<RedisOptionsText> for RedisOptions {
    type Error = &'static str;

    fn try_from(text: RedisOptionsText) -> Result<Self, Self::Error> {
        let mut options = match (text.url, text.cluster, text.sentinel) {
            (Some(url), None, None) => Self::new(&url, &text.prefix),
            (None, Some(nodes), None) if !nodes.is_empty() => Self::cluster(nodes, &text.prefix),
            (None, Some(_), None) => return Err("`cluster` lists no node"),
            (None, None, Some(s)) if s.nodes.is_empty() => return Err("`sentinel` lists no node"),
            (None, None, Some(s)) if s.master.is_empty() => {
                return Err("`sentinel` names no master");
            }
            (None, None, Some(s)) => {
                let url = crate::conn::sentinel_url(
                    &s.nodes,
                    &s.master,
                    s.tls,
                    s.password.as_deref(),
                    s.sentinel_password.as_deref(),
                );
                Self::new(&url, &text.prefix)
            }
            (None, None, None) => {
                return Err("give `url` (one server), `cluster` (the nodes of a cluster) or \
                            `sentinel` (the sentinels of a failed-over Redis)");
            }
            _ => return Err("give one of `url`, `cluster` and `sentinel`"),
        };
        if let Some(wait) = text.wait_for_replicas {
            options = options.wait_for_replicas(wait.replicas, wait.timeout);
        }
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
    fn sentinels_and_waiting_for_replicas_from_a_config_file() {
        let o: RedisOptions = serde_json::from_str(
            r#"{ "sentinel": { "nodes": ["10.0.0.1:26379", "10.0.0.2:26379"], "master": "mymaster",
                               "password": "s3cret", "sentinel_password": "p4ss", "tls": true },
                 "prefix": "shop", "wait_for_replicas": { "replicas": 1, "timeout": "250ms" } }"#,
        )
        .unwrap();
        assert_eq!(
            o.urls,
            ["rediss+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2:26379/mymaster\
              ?sentinel_password=p4ss"]
        );
        assert!(!o.cluster);
        assert_eq!(o.layout, KeyLayout::Standalone);
        let replicas = o.replicas.unwrap();
        assert_eq!((replicas.count, replicas.timeout), (1, Duration::from_millis(250)));
        let debug = format!("{o:?}");
        assert!(!debug.contains("s3cret") && !debug.contains("p4ss"), "{debug}");

        let o: RedisOptions = serde_json::from_str(
            r#"{ "url": "redis+sentinel://h1,h2/m", "prefix": "p",
                 "wait_for_replicas": { "replicas": 0, "timeout": "1s" } }"#,
        )
        .unwrap();
        assert_eq!(o.urls, ["redis+sentinel://h1,h2/m"]);
        assert_eq!(o.replicas, None, "0 replicas: off");
        let o = RedisOptions::sentinel(["10.0.0.1:26379", "10.0.0.2:26380"], "mymaster", "p");
        assert_eq!(o.urls, ["redis+sentinel://10.0.0.1:26379,10.0.0.2:26380/mymaster"]);
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
            r#"{ "sentinel": { "nodes": [], "master": "m" }, "prefix": "p" }"#,
            r#"{ "sentinel": { "nodes": ["h:1"], "master": "" }, "prefix": "p" }"#,
            r#"{ "sentinel": { "nodes": ["h:1"] }, "prefix": "p" }"#,
            r#"{ "sentinel": { "nodes": ["h:1"], "master": "m", "port": 1 }, "prefix": "p" }"#,
            r#"{ "url": "redis://h", "sentinel": { "nodes": ["h:1"], "master": "m" }, "prefix": "p" }"#,
            r#"{ "url": "redis://h", "prefix": "p", "wait_for_replicas": { "replicas": 1 } }"#,
            r#"{ "url": "redis://h", "prefix": "p", "wait_for_replicas": 1 }"#,
        ];
        for text in bad {
            assert!(serde_json::from_str::<RedisOptions>(text).is_err(), "{text}");
        }
    }
}
