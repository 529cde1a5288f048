//! The shop bot over Discord, set up from the environment (see `main.rs`).

use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability};
use botmesh_discord::DiscordProvider;
use botmesh_redis_store::RedisStore;
use botmesh_sql_store::SqliteStore;

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the bot reaches Discord and where it keeps its state. Its `Debug` output leaves the
/// token out.
#[derive(Clone)]
pub struct Settings {
    /// The bot token (`DISCORD_TOKEN`).
    pub token: String,
    /// Where API calls go instead of Discord (`DISCORD_PROXY`): a rate-limiting HTTP proxy, or
    /// the stand-in in tests.
    pub proxy: Option<String>,
    /// Replicas sharing Redis (`REDIS_URL`, `REPLICA_ID`). One process on SQLite without it.
    pub redis: Option<(String, String)>,
    /// The SQLite file of a single process (`SHOP_DB`, `shop.db` by default).
    pub sqlite: String,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("proxy", &self.proxy)
            .field("replica", &self.redis.as_ref().map(|(_, id)| id))
            .field("sqlite", &self.sqlite)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let token = var("DISCORD_TOKEN").ok_or("set DISCORD_TOKEN to your bot's token")?;
        let redis = var("REDIS_URL").map(|url| {
            let id =
                var("REPLICA_ID").or_else(|| var("HOSTNAME")).unwrap_or_else(|| "shop".to_owned());
            (url, id)
        });
        let sqlite = var("SHOP_DB").unwrap_or_else(|| "shop.db".to_owned());
        Ok(Self { token, proxy: var("DISCORD_PROXY"), redis, sqlite })
    }

    /// The provider these settings describe: guild and direct messages, with their content.
    pub fn provider(&self) -> DiscordProvider {
        let provider = DiscordProvider::new(&self.token, DiscordProvider::default_intents());
        match &self.proxy {
            Some(proxy) => provider.with_proxy(proxy),
            None => provider,
        }
    }
}

/// The shop bot on `provider`: on SQLite alone, or as a replica on Redis with coordination
/// and durability (one replica holds the gateway, the others stand by).
pub async fn bot(settings: &Settings, provider: DiscordProvider) -> Result<Bot, Error> {
    let builder = Bot::builder().provider(provider);
    let builder = match &settings.redis {
        Some((url, replica)) => {
            let store = RedisStore::new(url, "shop-discord").await?;
            let coordinator = store.coordinator(Duration::from_secs(15)).with_replica_id(replica);
            builder
                .store(Arc::new(store) as Arc<dyn Store>)
                .coordination(CoordinationConfig::new(coordinator).build())
                .durability(Durability::new())
        }
        None => builder.store(Arc::new(SqliteStore::open(&settings.sqlite).await?)),
    };
    Ok(shop::bot(builder).build()?)
}
