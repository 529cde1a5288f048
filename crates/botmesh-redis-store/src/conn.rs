//! One connection type over a single server, a cluster, or the master Sentinel names.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use botmesh_traits::{BoxError, Error};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::watch;

use crate::{RedisOptions, Replicas};

mod sentinel;
mod sentinel_url;

pub(crate) use sentinel::SentinelConn;
pub(crate) use sentinel_url::compose as sentinel_url;
use sentinel_url::{SentinelUrl, is_sentinel};

/// A connection that reconnects by itself: a connection manager on one server, the cluster
/// connection (which follows the slot map) on a cluster, and a connection to the master the
/// sentinels name (which follows failovers, see `conn/sentinel.rs`) through Sentinel.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
        }
    }
}

/// Where a store and its coordinators open more connections: the wake channel's
/// subscription, and the heartbeats' own connection.
#[derive(Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per store or coordinator, cloned when a coordinator is made: not worth a box"
)]
pub(crate) enum Source {
    /// One server (or, for a subscription, any node of a cluster).
    Client(redis::Client),
    /// The master the sentinels name, wherever it is now.
    Sentinel(SentinelConn),
}

impl Source {
    /// A pub/sub connection.
    pub(crate) async fn pubsub(&self) -> redis::RedisResult<PubSub> {
        match self {
            Self::Client(client) => client.get_async_pubsub().await,
            Self::Sentinel(conn) => conn.pubsub().await,
        }
    }

    /// Told each time the master may have moved (through Sentinel only): a subscription made
    /// before is to be made again.
    pub(crate) fn moved(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Self::Client(_) => None,
            Self::Sentinel(conn) => Some(conn.moved()),
        }
    }
}

/// Sends an idempotent command, and once more when the connection dropped under the first
/// try (a killed connection, a failover): the connection manager, or the Sentinel connection
/// (through the sentinels, to the master they name now), reconnects on that error, and a
/// command that may have run already does no harm running again. A timeout is not retried:
/// the server may be stuck, and the caller's own bound applies.
pub(crate) async fn idempotent<T, F, Fut>(mut send: F) -> redis::RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    match send().await {
        Err(e) if e.is_connection_dropped() => send().await,
        result => result,
    }
}

/// The waits between the tries of what is tried again in the background (withdrawing a
/// ticket, subscribing to a wake channel or to the sentinels): exponential with jitter, from
/// 10 ms to one second, without end; the same policy as the runtime's retries.
pub(crate) fn backoff() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Connection settings shared by the store and the coordinator.
#[derive(Debug, Clone)]
pub(crate) struct Connect {
    pub(crate) urls: Vec<String>,
    pub(crate) cluster: bool,
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    #[cfg_attr(not(feature = "tls"), allow(dead_code, reason = "a CA is only given with `tls`"))]
    pub(crate) tls_root: Option<Vec<u8>>,
    /// The replicas every grant waits for.
    pub(crate) replicas: Option<Replicas>,
}

/// The URL without its password, for logs and errors.
pub(crate) use botmesh_traits::redact_url as redact;

fn config_error(msg: String) -> Error {
    Error::Configuration(BoxError::from(msg))
}

impl Connect {
    pub(crate) async fn open(&self) -> Result<(Conn, Source), Error> {
        let first =
            self.urls.first().ok_or_else(|| config_error("no Redis URL given".to_owned()))?;
        self.check()?;
        if is_sentinel(first) {
            return self.open_sentinel(first).await;
        }
        // Errors from the driver name the host at most, never the password; ours use `redact`.
        let client = self.client(first).map_err(|e| {
            config_error(format!("invalid Redis URL {}: {:?}", redact(first), e.kind()))
        })?;
        let conn = match self.cluster {
            true => {
                let builder =
                    redis::cluster::ClusterClientBuilder::new(self.urls.iter().map(String::as_str))
                        .connection_timeout(self.connection_timeout)
                        .response_timeout(self.response_timeout);
                #[cfg(feature = "tls")]
                let builder = match self.tls_root {
                    Some(_) => builder.certs(self.certs()),
                    None => builder,
                };
                let cluster = builder.build().map_err(|e| {
                    config_error(format!("invalid Redis Cluster URLs: {:?}", e.kind()))
                })?;
                Conn::Cluster(
                    cluster.get_async_connection().await.map_err(|e| unreachable_err(first, e))?,
                )
            }
            false => Conn::Single(
                ConnectionManager::new_with_config(client.clone(), self.manager_config())
                    .await
                    .map_err(|e| unreachable_err(first, e))?,
            ),
        };
        Ok((conn, Source::Client(client)))
    }

    /// Settings that cannot go together.
    fn check(&self) -> Result<(), Error> {
        if let Some(replicas) = self.replicas {
            if self.cluster {
                // `WAIT` must reach the node that ran the script; the cluster connection
                // routes a command without keys anywhere.
                return Err(config_error(
                    "wait_for_replicas is not supported on a Redis Cluster".to_owned(),
                ));
            }
            if replicas.timeout >= self.response_timeout {
                return Err(config_error(format!(
                    "the wait_for_replicas timeout ({:?}) must be shorter than the \
                     response_timeout ({:?}), or the reply times out first",
                    replicas.timeout, self.response_timeout
                )));
            }
        }
        if self.cluster && self.urls.iter().any(|u| is_sentinel(u)) {
            return Err(config_error("a Redis Cluster is not reached through Sentinel".to_owned()));
        }
        Ok(())
    }

    /// Connects to the master the sentinels of `url` name.
    async fn open_sentinel(&self, url: &str) -> Result<(Conn, Source), Error> {
        let parsed = SentinelUrl::parse(url).map_err(|reason| {
            config_error(format!("invalid Redis Sentinel URL {}: {reason}", redact(url)))
        })?;
        let master = parsed.master.clone();
        let conn =
            SentinelConn::connect(parsed, self.clone()).await.map_err(|e| match e.kind() {
                redis::ErrorKind::MasterNameNotFoundBySentinel => config_error(format!(
                    "no sentinel of {} watches a master named {master:?}",
                    redact(url)
                )),
                redis::ErrorKind::InvalidClientConfig => config_error(format!(
                    "invalid Redis Sentinel URL {}: {:?}",
                    redact(url),
                    e.kind()
                )),
                _ if refused_credentials(&e) => config_error(format!(
                    "the master named by the sentinels of {} refuses the credentials given",
                    redact(url)
                )),
                _ => unreachable_err(url, e),
            })?;
        Ok((Conn::Sentinel(conn.clone()), Source::Sentinel(conn)))
    }

    /// A connection of its own (for the heartbeats), from `source`.
    pub(crate) async fn open_own(&self, source: &Source) -> Result<Conn, Error> {
        match source {
            Source::Sentinel(conn) => Ok(Conn::Sentinel(conn.sibling())),
            Source::Client(client) if !self.cluster => self.open_single(client.clone()).await,
            Source::Client(_) => self.open().await.map(|(conn, _)| conn),
        }
    }
}

impl From<&RedisOptions> for Connect {
    fn from(options: &RedisOptions) -> Self {
        Self {
            urls: options.urls.clone(),
            cluster: options.cluster,
            response_timeout: options.response_timeout,
            connection_timeout: options.connection_timeout,
            tls_root: options.tls_root.clone(),
            replicas: options.replicas,
        }
    }
}

impl Connect {
    /// Longer than any one call's reply can take: its response timeout, and the wait for
    /// replicas it may add.
    pub(crate) fn settle(&self) -> Duration {
        self.response_timeout + self.replicas.map_or(Duration::ZERO, |r| r.timeout)
    }

    /// The client of `url`: over rustls for `rediss://`, trusting the configured CA.
    #[cfg(feature = "tls")]
    pub(crate) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        // `rediss://` and `rediss+sentinel://`.
        if self.urls.iter().any(|u| u.starts_with("rediss")) {
            // One process-wide rustls provider; a second install is refused and harmless.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        match &self.tls_root {
            Some(_) => redis::Client::build_with_tls(url, self.certs()),
            None => redis::Client::open(url),
        }
    }

    /// Without the `tls` feature, a `rediss://` URL is a configuration error.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        if self.urls.iter().any(|u| u.starts_with("rediss")) {
            let reason = "rediss:// needs botmesh-redis-store's `tls` feature";
            return Err((redis::ErrorKind::InvalidClientConfig, reason).into());
        }
        redis::Client::open(url)
    }

    #[cfg(feature = "tls")]
    fn certs(&self) -> redis::TlsCertificates {
        redis::TlsCertificates { client_tls: None, root_cert: self.tls_root.clone() }
    }

    /// How a single-server connection reconnects: a couple of quick attempts, within about a
    /// second, so that a call on a server that is really down fails soon. Riding out longer
    /// outages is the callers' policy (the message path tries again until its turn wait runs
    /// out), not the connection's.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500))
    }

    /// A connection manager of its own on an existing client.
    pub(crate) async fn open_single(&self, client: redis::Client) -> Result<Conn, Error> {
        ConnectionManager::new_with_config(client, self.manager_config())
            .await
            .map(Conn::Single)
            .map_err(|e| unreachable_err("the configured Redis", e))
    }
}

/// Whether a server refused to let us in (no password, a wrong one, a user it does not know).
fn refused_credentials(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

fn unreachable_err(url: &str, e: redis::RedisError) -> Error {
    Error::CoordinationUnavailable {
        reason: format!("cannot connect to Redis at {}", redact(url)),
        source: Some(Box::new(e)),
    }
}

/// A duration as Redis's millisecond arguments take it: whole milliseconds, at least one (a
/// `PX` of 0 is an error), saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_appear_in_a_redacted_url() {
        assert_eq!(redact("redis://bot:s3cret@10.0.0.1:6379/0"), "redis://bot:***@10.0.0.1:6379/0");
        assert_eq!(redact("rediss://:s3cret@host/"), "rediss://***@host/");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
        assert_eq!(
            redact("redis+sentinel://:s3cret@h1:26379,h2:26379/mymaster?sentinel_password=p4ss"),
            "redis+sentinel://***@h1:26379,h2:26379/mymaster?sentinel_password=***"
        );
    }
}
