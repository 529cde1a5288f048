//! The shop bot on Meta's channels, set up from the environment (see `main.rs`).

use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability, MemoryStore};
use botmesh_meta::{Channel, MetaProvider};
use botmesh_redis_store::RedisStore;
use botmesh_traits::webhook::axum::Router;

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The app's credentials, its channels, and where the bot keeps its state. Its `Debug` output
/// leaves the token and the secrets out.
#[derive(Clone)]
pub struct Settings {
    /// The Graph API access token (`META_TOKEN`).
    pub token: String,
    /// The app secret that signs webhooks (`META_APP_SECRET`).
    pub app_secret: String,
    /// The token of the webhook verification handshake (`META_VERIFY_TOKEN`).
    pub verify_token: String,
    /// Another Graph API (`META_API_URL`), the stand-in in tests.
    pub api_url: Option<String>,
    /// The channels: `WHATSAPP_PHONE_NUMBER_ID`, `MESSENGER_PAGE_ID`, `INSTAGRAM_ACCOUNT_ID`
    /// (each optional, at least one).
    pub channels: Vec<Channel>,
    /// Replicas sharing Redis (`REDIS_URL`, `REPLICA_ID`); one process in memory without it.
    pub redis: Option<(String, String)>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("api_url", &self.api_url)
            .field("channels", &self.channels)
            .field("replica", &self.redis.as_ref().map(|(_, id)| id))
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let need = |name: &str| var(name).ok_or_else(|| format!("set {name}"));
        let mut channels = Vec::new();
        if let Some(id) = var("WHATSAPP_PHONE_NUMBER_ID") {
            channels.push(Channel::WhatsApp { phone_number_id: id });
        }
        if let Some(id) = var("MESSENGER_PAGE_ID") {
            channels.push(Channel::Messenger { page_id: id });
        }
        if let Some(id) = var("INSTAGRAM_ACCOUNT_ID") {
            channels.push(Channel::Instagram { account_id: id });
        }
        if channels.is_empty() {
            return Err(
                "set WHATSAPP_PHONE_NUMBER_ID, MESSENGER_PAGE_ID or INSTAGRAM_ACCOUNT_ID".into()
            );
        }
        let redis = var("REDIS_URL").map(|url| {
            let id =
                var("REPLICA_ID").or_else(|| var("HOSTNAME")).unwrap_or_else(|| "shop".to_owned());
            (url, id)
        });
        Ok(Self {
            token: need("META_TOKEN")?,
            app_secret: need("META_APP_SECRET")?,
            verify_token: need("META_VERIFY_TOKEN")?,
            api_url: var("META_API_URL"),
            channels,
            redis,
        })
    }

    /// One provider per channel.
    pub fn providers(&self) -> Result<Vec<MetaProvider>, Error> {
        let mut providers = Vec::new();
        for channel in &self.channels {
            let provider = MetaProvider::new(
                channel.clone(),
                &self.token,
                &self.app_secret,
                &self.verify_token,
            )?;
            providers.push(match &self.api_url {
                Some(url) => provider.with_api_url(url.clone()),
                None => provider,
            });
        }
        Ok(providers)
    }
}

/// The webhook endpoints of `providers`, each at `/meta/<provider id>`, with a health check.
pub fn app(providers: &[MetaProvider]) -> Router {
    let health = botmesh_traits::webhook::axum::routing::get(|| async { "ok" });
    providers.iter().fold(Router::new().route("/healthz", health), |app, p| {
        app.merge(p.router(&format!("/meta/{}", botmesh_core::traits::Provider::id(p))))
    })
}

/// The shop bot answering on every provider: in memory alone, or as a replica on Redis with
/// coordination and durability, so that a message Meta got a `200` for is never lost.
pub async fn bot(settings: &Settings, providers: &[MetaProvider]) -> Result<Bot, Error> {
    let mut builder = Bot::builder();
    for provider in providers {
        builder = builder.provider(provider.clone());
    }
    let builder = match &settings.redis {
        Some((url, replica)) => {
            let store = RedisStore::new(url, "shop-meta").await?;
            let coordinator = store.coordinator(Duration::from_secs(15)).with_replica_id(replica);
            builder
                .store(Arc::new(store) as Arc<dyn Store>)
                .coordination(CoordinationConfig::new(coordinator).build())
                .durability(Durability::new())
        }
        None => builder.store(Arc::new(MemoryStore::new())),
    };
    Ok(shop::bot(builder).build()?)
}
