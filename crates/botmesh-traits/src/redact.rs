//! Connection URLs without their secrets, for logs, errors and `Debug` output.

/// `url` with its password masked: `scheme://user:***@host/..`, `scheme://***@host/..` when
/// only a password is given, and `***` as the value of every query parameter whose name
/// contains `password` (`?sslpassword=..`). A URL without credentials comes back unchanged.
///
/// Every store and provider that shows a connection URL shows it through this.
///
/// ```
/// use botmesh_traits::redact_url;
///
/// assert_eq!(redact_url("redis://bot:s3cret@10.0.0.1:6379/0"), "redis://bot:***@10.0.0.1:6379/0");
/// assert_eq!(redact_url("rediss://:s3cret@host/"), "rediss://***@host/");
/// assert_eq!(
///     redact_url("postgres://db/shop?user=bot&password=s3cret"),
///     "postgres://db/shop?user=bot&password=***",
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let host = match authority.rsplit_once('@') {
        Some((auth, host)) => match auth.split_once(':') {
            Some(("", _)) => format!("***@{host}"),
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{auth}@{host}"),
        },
        None => authority.to_owned(),
    };
    let Some(path) = path else { return format!("{scheme}://{host}") };
    let path = match path.split_once('?') {
        Some((db, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.to_ascii_lowercase().contains("password") => {
                        format!("{k}=***")
                    }
                    _ => p.to_owned(),
                })
                .collect();
            format!("{db}?{}", params.join("&"))
        }
        None => path.to_owned(),
    };
    format!("{scheme}://{host}/{path}")
}
