//! [`MongoOptions`]: how to reach MongoDB and where the store keeps its collections.

use std::time::Duration;

/// The database used when neither the options nor the URL name one.
pub(crate) const DEFAULT_DATABASE: &str = "botmesh";

/// How to reach MongoDB, and where the store keeps its data.
///
/// Defaults, each used only when neither a setter nor the URL gives a value: the database named
/// in the URL's path, else `botmesh`; collections prefixed `botmesh_`; a pool of up to 10
/// connections per server; 5 s to open a connection and 5 s to find a usable server; the
/// indexes created on connect. `Debug` output shows the URL without its password.
///
/// With the `serde` feature they read from a configuration file: `url`, and optionally each
/// setter's name (`database`, `collection_prefix`, `max_pool_size`, `min_pool_size`,
/// `connect_timeout`, `server_selection_timeout`, `app_name`, `migrate`), durations as text
/// (`"5s"`); unknown keys are refused.
#[derive(Clone)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(from = "crate::config::MongoOptionsText")
)]
#[non_exhaustive]
#[must_use = "options do nothing until the store connects with them"]
pub struct MongoOptions {
    pub(crate) url: String,
    pub(crate) database: Option<String>,
    pub(crate) collection_prefix: String,
    pub(crate) max_pool_size: Option<u32>,
    pub(crate) min_pool_size: Option<u32>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) server_selection_timeout: Option<Duration>,
    pub(crate) app_name: Option<String>,
    pub(crate) migrate: bool,
}

impl std::fmt::Debug for MongoOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("MongoOptions")
            .field("url", &botmesh_traits::redact_url(&self.url))
            .field("database", &self.database)
            .field("collection_prefix", &self.collection_prefix)
            .field("max_pool_size", &self.max_pool_size)
            .field("min_pool_size", &self.min_pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("server_selection_timeout", &self.server_selection_timeout)
            .field("app_name", &self.app_name)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl MongoOptions {
    /// A deployment at `url`: `mongodb://host:27017/db`, `mongodb+srv://cluster.example.net/db`
    /// (with the default `dns-srv` feature), with any of the driver's URL options
    /// (`replicaSet=`, `w=majority`, `tls=true`, `directConnection=true`, ...).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            database: None,
            collection_prefix: "botmesh_".to_owned(),
            max_pool_size: None,
            min_pool_size: None,
            connect_timeout: None,
            server_selection_timeout: None,
            app_name: None,
            migrate: true,
        }
    }

    /// The database to use, instead of the one in the URL's path.
    pub fn database(mut self, name: impl Into<String>) -> Self {
        self.database = Some(name.into());
        self
    }

    /// The prefix of every collection name (`botmesh_` by default, giving `botmesh_chats`,
    /// `botmesh_checkpoints`, ...), so several bots can share one database.
    pub fn collection_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.collection_prefix = prefix.into();
        self
    }

    /// The largest number of pooled connections to each server.
    pub fn max_pool_size(mut self, n: u32) -> Self {
        self.max_pool_size = Some(n);
        self
    }

    /// The number of connections to each server kept open while idle.
    pub fn min_pool_size(mut self, n: u32) -> Self {
        self.min_pool_size = Some(n);
        self
    }

    /// How long opening one connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long an operation waits for a usable server before it fails. This is also how long
    /// [`MongoStore::connect`](crate::MongoStore::connect) waits for an unreachable server.
    pub fn server_selection_timeout(mut self, timeout: Duration) -> Self {
        self.server_selection_timeout = Some(timeout);
        self
    }

    /// The name the connections report to the server (shown in its logs and `currentOp`).
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// Whether to create the store's indexes and record the schema version on connect (the
    /// default). Turn it off when a deploy step does it; the version recorded in the database
    /// is still checked.
    pub fn migrate(mut self, yes: bool) -> Self {
        self.migrate = yes;
        self
    }

    /// The URL.
    pub fn get_url(&self) -> &str {
        &self.url
    }

    /// The collection prefix.
    pub fn get_collection_prefix(&self) -> &str {
        &self.collection_prefix
    }
}
