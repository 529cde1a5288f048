//! The `redis+sentinel://` URL: the sentinels of a Redis that Sentinel fails over, and the
//! name they watch its master under.
//!
//! ```text
//! redis+sentinel://[[USER]:PASSWORD@]HOST1[:PORT1][,HOST2[:PORT2]...]/MASTER_NAME[/DB]
//!     [?sentinel_username=USER&sentinel_password=PASSWORD]
//! ```
//!
//! The form other Redis clients give this scheme (redis-py's `redis+sentinel` parsers, Prefect,
//! RedisVL; Lettuce's `redis-sentinel://` is the same with the master name as a parameter):
//! comma-separated sentinels (port 26379 when left out, IPv6 hosts in brackets), then the
//! master's name as the path, then the database. The user and password before the hosts are
//! the data nodes' (the master's and its replicas'), percent-encoded as in a `redis://` URL;
//! sentinels that want a password of their own take it from the `sentinel_password` (and
//! `sentinel_username`) parameters. `rediss+sentinel://` speaks TLS to both.

/// The port of a sentinel whose URL names none.
pub(crate) const DEFAULT_PORT: u16 = 26379;

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the sentinels and the data nodes.
    pub(crate) tls: bool,
    /// The data nodes' `user:password` (or `:password`), percent-encoded as written.
    auth: Option<String>,
    /// The sentinels: host (IPv6 in brackets) and port.
    pub(crate) nodes: Vec<(String, u16)>,
    /// The name the sentinels watch the master under.
    pub(crate) master: String,
    pub(crate) db: i64,
    /// The sentinels' own `user:password`, percent-encoded.
    sentinel_auth: Option<String>,
}

/// Whether `url` names its Redis through Sentinel.
pub(crate) fn is_sentinel(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis+sentinel")
            || scheme.eq_ignore_ascii_case("rediss+sentinel")
    })
}

impl SentinelUrl {
    /// Parses `url`. The error says what is wrong without repeating the URL (which may hold a
    /// password).
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "redis+sentinel" => false,
            "rediss+sentinel" => true,
            _ => return Err("the scheme is not redis+sentinel:// or rediss+sentinel://".into()),
        };
        let (rest, query) = rest.split_once('?').map_or((rest, None), |(r, q)| (r, Some(q)));
        let (authority, path) = rest.split_once('/').ok_or("no master name after the sentinels")?;
        let (auth, hosts) = match authority.rsplit_once('@') {
            Some((auth, hosts)) => (Some(auth.to_owned()), hosts),
            None => (None, authority),
        };
        let nodes = hosts.split(',').map(parse_node).collect::<Result<Vec<_>, _>>()?;
        let mut path = path.split('/');
        let master = path.next().unwrap_or_default();
        if master.is_empty() {
            return Err("no master name after the sentinels".into());
        }
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db.parse().map_err(|_| format!("database {db:?} is not a number"))?,
        };
        if path.any(|p| !p.is_empty()) {
            return Err("more than a master name and a database in the path".into());
        }
        let (mut sentinel_user, mut sentinel_password) = (None, None);
        for param in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value = Some(percent_decode(value)?);
            match key {
                "sentinel_username" => sentinel_user = value,
                "sentinel_password" => sentinel_password = value,
                _ => return Err(format!("unknown parameter {key:?}")),
            }
        }
        let sentinel_auth = match (sentinel_user, sentinel_password) {
            (None, None) => None,
            (user, password) => Some(format!(
                "{}:{}",
                encode(user.as_deref().unwrap_or_default()),
                encode(password.as_deref().unwrap_or_default())
            )),
        };
        Ok(Self { tls, auth, nodes, master: master.to_owned(), db, sentinel_auth })
    }

    /// The URL of each sentinel, with the sentinels' own credentials.
    pub(crate) fn sentinel_urls(&self) -> Vec<String> {
        let auth = self.sentinel_auth.as_ref().map(|a| format!("{a}@")).unwrap_or_default();
        self.nodes
            .iter()
            .map(|(host, port)| format!("{}://{auth}{host}:{port}", self.scheme()))
            .collect()
    }

    /// The URL of the data node at `ip:port`, with the data nodes' credentials and database.
    pub(crate) fn node_url(&self, ip: &str, port: u16) -> String {
        let auth = self.auth.as_ref().map(|a| format!("{a}@")).unwrap_or_default();
        let host = if ip.contains(':') && !ip.starts_with('[') {
            format!("[{ip}]")
        } else {
            ip.to_owned()
        };
        format!("{}://{auth}{host}:{port}/{}", self.scheme(), self.db)
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "rediss" } else { "redis" }
    }
}

/// The `redis+sentinel://` URL of `nodes` (`host:port` each) and master `master`, with the data
/// nodes' `password` and the sentinels' own, for the options' constructor and the
/// configuration file.
pub(crate) fn compose(
    nodes: &[String],
    master: &str,
    tls: bool,
    password: Option<&str>,
    sentinel_password: Option<&str>,
) -> String {
    let scheme = if tls { "rediss+sentinel" } else { "redis+sentinel" };
    let auth = password.map(|p| format!(":{}@", encode(p))).unwrap_or_default();
    let query =
        sentinel_password.map(|p| format!("?sentinel_password={}", encode(p))).unwrap_or_default();
    format!("{scheme}://{auth}{}/{master}{query}", nodes.join(","))
}

/// `host[:port]`, an IPv6 host in brackets.
fn parse_node(node: &str) -> Result<(String, u16), String> {
    let (host, port) = match node.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']').ok_or("an IPv6 host without its closing ]")?;
            (format!("[{host}]"), rest.strip_prefix(':'))
        }
        None => match node.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (node.to_owned(), None),
        },
    };
    if host.is_empty() || host == "[]" {
        return Err("an empty sentinel address".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port.parse().map_err(|_| format!("sentinel port {port:?} is not a port"))?,
    };
    Ok((host, port))
}

/// Percent-encodes everything but the unreserved characters, for a URL's user info or query.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` as a space, as in a query).
fn percent_decode(text: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                let byte = std::str::from_utf8(&hex)
                    .ok()
                    .filter(|h| h.len() == 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("a bad %-escape in a parameter")?;
                out.push(byte);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| "a parameter that is not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentinels_the_master_s_name_the_database_and_both_passwords() {
        let url = SentinelUrl::parse(
            "redis+sentinel://:s%40cret@10.0.0.1:26380,sentinel-b,[::1]:5000/mymaster/2\
             ?sentinel_password=p%26q",
        )
        .unwrap();
        assert!(!url.tls);
        assert_eq!(
            url.nodes,
            [
                ("10.0.0.1".to_owned(), 26380),
                ("sentinel-b".to_owned(), DEFAULT_PORT),
                ("[::1]".to_owned(), 5000)
            ]
        );
        assert_eq!(url.master, "mymaster");
        assert_eq!(url.db, 2);
        assert_eq!(
            url.sentinel_urls(),
            [
                "redis://:p%26q@10.0.0.1:26380",
                "redis://:p%26q@sentinel-b:26379",
                "redis://:p%26q@[::1]:5000"
            ]
        );
        assert_eq!(url.node_url("10.0.0.9", 6379), "redis://:s%40cret@10.0.0.9:6379/2");
        assert_eq!(url.node_url("fe80::1", 6379), "redis://:s%40cret@[fe80::1]:6379/2");

        let tls = SentinelUrl::parse("REDISS+SENTINEL://h1:1,h2:2/m").unwrap();
        assert!(tls.tls);
        assert_eq!(tls.db, 0);
        assert_eq!(tls.sentinel_urls(), ["rediss://h1:1", "rediss://h2:2"]);
        assert_eq!(tls.node_url("10.0.0.9", 6379), "rediss://10.0.0.9:6379/0");
        assert!(is_sentinel("Redis+Sentinel://h/m"));
        assert!(!is_sentinel("redis://h:6379/0"));
    }

    #[test]
    fn a_composed_url_parses_back_to_what_it_was_made_of() {
        let nodes = ["10.0.0.1:26379".to_owned(), "10.0.0.2:26379".to_owned()];
        let text = compose(&nodes, "mymaster", true, Some("p@ss:w/rd"), Some("s&p"));
        assert_eq!(
            text,
            "rediss+sentinel://:p%40ss%3Aw%2Frd@10.0.0.1:26379,10.0.0.2:26379/mymaster\
             ?sentinel_password=s%26p"
        );
        let url = SentinelUrl::parse(&text).unwrap();
        assert_eq!(url.nodes.len(), 2);
        assert_eq!(url.sentinel_urls()[0], "rediss://:s%26p@10.0.0.1:26379");
    }

    #[test]
    fn a_wrong_url_says_what_is_wrong_without_its_password() {
        let bad = [
            "redis://s3cret@h:6379/0",
            "redis+sentinel://:s3cret@h1:26379",
            "redis+sentinel://:s3cret@h1:26379/",
            "redis+sentinel://:s3cret@h1:port/m",
            "redis+sentinel://:s3cret@h1:26379,/m",
            "redis+sentinel://:s3cret@[::1/m",
            "redis+sentinel://:s3cret@h1/m/zero",
            "redis+sentinel://:s3cret@h1/m/0/x",
            "redis+sentinel://:s3cret@h1/m?timeout=1",
            "redis+sentinel://:s3cret@h1/m?sentinel_password=%zz",
        ];
        for url in bad {
            let reason = SentinelUrl::parse(url).unwrap_err();
            assert!(!reason.contains("s3cret"), "{url}: {reason}");
        }
    }
}
