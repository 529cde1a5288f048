//! The shop bot over Telegram, set up from the environment (see `main.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability};
use botmesh_redis_store::RedisStore;
use botmesh_sql_store::SqliteStore;
use botmesh_telegram::TelegramProvider;

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the bot reaches Telegram and where it keeps its state. Its `Debug` output leaves the
/// token and the secret out.
#[derive(Clone)]
pub struct Settings {
    /// The bot token (`TELEGRAM_TOKEN`).
    pub token: String,
    /// Another Bot API server (`TELEGRAM_API_URL`): a local one, or a stand-in in tests.
    pub api_url: Option<url::Url>,
    /// Webhook mode (`TELEGRAM_WEBHOOK_URL`, `TELEGRAM_SECRET`, `PORT`): the public HTTPS URL,
    /// the secret token, and where to listen. Long polling without it.
    pub webhook: Option<(url::Url, String, SocketAddr)>,
    /// Replicas sharing Redis (`REDIS_URL`, `REPLICA_ID`). One process on SQLite without it.
    pub redis: Option<(String, String)>,
    /// The SQLite file of a single process (`SHOP_DB`, `shop.db` by default).
    pub sqlite: String,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("api_url", &self.api_url)
            .field("webhook", &self.webhook.as_ref().map(|(url, _, addr)| (url, addr)))
            .field("replica", &self.redis.as_ref().map(|(_, id)| id))
            .field("sqlite", &self.sqlite)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let token = var("TELEGRAM_TOKEN").ok_or("set TELEGRAM_TOKEN to your bot's token")?;
        let api_url = var("TELEGRAM_API_URL").map(|u| u.parse()).transpose()?;
        let webhook = match var("TELEGRAM_WEBHOOK_URL") {
            Some(url) => {
                let secret = var("TELEGRAM_SECRET").ok_or("webhooks need TELEGRAM_SECRET")?;
                let port: u16 = var("PORT").map_or(Ok(8080), |p| p.parse())?;
                Some((url.parse()?, secret, SocketAddr::from(([0, 0, 0, 0], port))))
            }
            None => None,
        };
        let redis = var("REDIS_URL").map(|url| {
            let id =
                var("REPLICA_ID").or_else(|| var("HOSTNAME")).unwrap_or_else(|| "shop".to_owned());
            (url, id)
        });
        let sqlite = var("SHOP_DB").unwrap_or_else(|| "shop.db".to_owned());
        Ok(Self { token, api_url, webhook, redis, sqlite })
    }

    /// The provider these settings describe.
    pub fn provider(&self) -> TelegramProvider {
        let provider = match &self.webhook {
            Some((url, secret, _)) => TelegramProvider::webhook(&self.token, url.clone(), secret),
            None => TelegramProvider::polling(&self.token),
        };
        match &self.api_url {
            Some(url) => provider.with_api_url(url.clone()),
            None => provider,
        }
    }
}

/// The shop bot on `provider`: on SQLite alone, or as a replica on Redis with coordination
/// and durability.
pub async fn bot(settings: &Settings, provider: TelegramProvider) -> Result<Bot, Error> {
    let builder = Bot::builder().provider(provider);
    let builder = match &settings.redis {
        Some((url, replica)) => {
            let store = RedisStore::new(url, "shop-telegram").await?;
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
