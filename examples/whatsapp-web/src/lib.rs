//! The shop bot on one WhatsApp number, set up from the environment (see `main.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability};
use botmesh_redis_store::RedisStore;
use botmesh_sql_store::SqliteStore;
use botmesh_whatsapp_web::{Session, WhatsAppWebProvider};

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where the session lives, how it pairs, and where the bot keeps its state.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The session directory (`WHATSAPP_SESSION_DIR`, `whatsapp-session` by default). With
    /// replicas, a volume every replica mounts; unused when the session is in the store.
    pub session_dir: PathBuf,
    /// Keep the session in the bot's store instead of the directory
    /// (`WHATSAPP_SESSION=store`; needs `REDIS_URL`): replicas then need no shared volume.
    pub session_in_store: bool,
    /// Pair with a code for this number (`WHATSAPP_PHONE`, digits with the country code)
    /// instead of a QR code.
    pub pair_phone: Option<String>,
    /// Replicas sharing Redis (`REDIS_URL`, `REPLICA_ID`). One process on SQLite without it.
    pub redis: Option<(String, String)>,
    /// The SQLite file of a single process (`SHOP_DB`, `shop.db` by default).
    pub sqlite: String,
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let session_dir = var("WHATSAPP_SESSION_DIR").unwrap_or_else(|| "whatsapp-session".into());
        let redis = var("REDIS_URL").map(|url| {
            let id =
                var("REPLICA_ID").or_else(|| var("HOSTNAME")).unwrap_or_else(|| "shop".to_owned());
            (url, id)
        });
        Self {
            session_dir: session_dir.into(),
            session_in_store: var("WHATSAPP_SESSION").is_some_and(|v| v == "store"),
            pair_phone: var("WHATSAPP_PHONE"),
            redis,
            sqlite: var("SHOP_DB").unwrap_or_else(|| "shop.db".to_owned()),
        }
    }

    /// How the provider pairs: a code for the number, or a QR code (printed to the terminal).
    pub fn pairing(&self, provider: WhatsAppWebProvider) -> WhatsAppWebProvider {
        match &self.pair_phone {
            Some(phone) => provider.with_pair_code(phone.clone()),
            None => provider,
        }
    }

    /// Where the session is kept: the directory, or the bot's store.
    pub fn session(&self) -> Session {
        if self.session_in_store { Session::Store } else { Session::Dir(self.session_dir.clone()) }
    }

    /// The provider on whatsapp-rust these settings describe.
    pub fn provider(&self) -> WhatsAppWebProvider {
        self.pairing(WhatsAppWebProvider::new(self.session()))
    }
}

/// The shop bot on `provider`: on SQLite alone, or as a replica on Redis with coordination
/// and durability. With replicas, the elected one opens the WhatsApp session and the others
/// stand by.
pub async fn bot(settings: &Settings, provider: WhatsAppWebProvider) -> Result<Bot, Error> {
    let builder = Bot::builder().provider(provider);
    let builder = match &settings.redis {
        Some((url, replica)) => {
            let store = RedisStore::new(url, "shop-whatsapp").await?;
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
