//! The shop bot by e-mail, set up from the environment (see `main.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Durability};
use botmesh_email::{EmailProvider, ImapConfig, Security, SmtpConfig};
use botmesh_redis_store::RedisStore;
use botmesh_sql_store::SqliteStore;

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the bot reaches its mailbox and where it keeps its state. The passwords and the ingest
/// secret stay out of its `Debug` output.
#[derive(Clone)]
pub struct Settings {
    /// The mailbox read over IMAP (`IMAP_HOST`, `IMAP_PORT`, `IMAP_USER`, `IMAP_PASSWORD`,
    /// `IMAP_PLAIN=1` for a server without TLS). `None` in ingest mode.
    pub imap: Option<ImapConfig>,
    /// Ingest mode (`INGEST_SECRET`, `PORT`): the shared secret the mail service sends, and
    /// where to listen.
    pub ingest: Option<(String, SocketAddr)>,
    /// Where replies go out (`SMTP_HOST`, `SMTP_PORT`, `SMTP_USER`, `SMTP_PASSWORD`,
    /// `SMTP_SECURITY` = `starttls` (default), `tls` or `plain`, `MAIL_FROM`).
    pub smtp: SmtpConfig,
    /// Replicas sharing Redis (`REDIS_URL`, `REPLICA_ID`). One process on SQLite without it.
    pub redis: Option<(String, String)>,
    /// The SQLite file of a single process (`SHOP_DB`, `shop.db` by default).
    pub sqlite: String,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("imap", &self.imap)
            .field("ingest", &self.ingest.as_ref().map(|(_, addr)| addr))
            .field("smtp", &self.smtp)
            .field("replica", &self.redis.as_ref().map(|(_, id)| id))
            .field("sqlite", &self.sqlite)
            .finish()
    }
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let from = var("MAIL_FROM").ok_or("set MAIL_FROM to the bot's address")?;
        let smtp_host = var("SMTP_HOST").ok_or("set SMTP_HOST")?;
        let security = match var("SMTP_SECURITY").as_deref() {
            None | Some("starttls") => Security::StartTls,
            Some("tls") => Security::Tls,
            Some("plain") => Security::Plain,
            Some(other) => {
                return Err(format!("SMTP_SECURITY {other:?}: starttls, tls or plain").into());
            }
        };
        let mut smtp = SmtpConfig::new(smtp_host, &from).security(security);
        if let Some(port) = var("SMTP_PORT") {
            smtp = smtp.port(port.parse()?);
        }
        if let (Some(user), Some(password)) = (var("SMTP_USER"), var("SMTP_PASSWORD")) {
            smtp = smtp.credentials(user, &password);
        }
        let ingest = match var("INGEST_SECRET") {
            Some(secret) => {
                let port: u16 = var("PORT").map_or(Ok(8080), |p| p.parse())?;
                Some((secret, SocketAddr::from(([0, 0, 0, 0], port))))
            }
            None => None,
        };
        let imap = match &ingest {
            Some(_) => None,
            None => {
                let host = var("IMAP_HOST").ok_or("set IMAP_HOST, or INGEST_SECRET")?;
                let user = var("IMAP_USER").unwrap_or_else(|| from.clone());
                let password = var("IMAP_PASSWORD").ok_or("set IMAP_PASSWORD")?;
                let mut imap = ImapConfig::new(host, user, &password);
                if var("IMAP_PLAIN").is_some() {
                    imap = imap.security(Security::Plain).port(143);
                }
                if let Some(port) = var("IMAP_PORT") {
                    imap = imap.port(port.parse()?);
                }
                Some(imap)
            }
        };
        let redis = var("REDIS_URL").map(|url| {
            let id =
                var("REPLICA_ID").or_else(|| var("HOSTNAME")).unwrap_or_else(|| "shop".to_owned());
            (url, id)
        });
        let sqlite = var("SHOP_DB").unwrap_or_else(|| "shop.db".to_owned());
        Ok(Self { imap, ingest, smtp, redis, sqlite })
    }

    /// The provider these settings describe.
    pub fn provider(&self) -> EmailProvider {
        match (&self.imap, &self.ingest) {
            (Some(imap), _) => EmailProvider::imap(imap.clone(), self.smtp.clone()),
            (None, Some((secret, _))) => EmailProvider::ingest(secret, self.smtp.clone()),
            (None, None) => EmailProvider::ingest("", self.smtp.clone()),
        }
    }
}

/// The shop bot on `provider`: on SQLite alone, or as a replica on Redis with coordination
/// and durability.
pub async fn bot(settings: &Settings, provider: EmailProvider) -> Result<Bot, Error> {
    let builder = Bot::builder().provider(provider);
    let builder = match &settings.redis {
        Some((url, replica)) => {
            let store = RedisStore::new(url, "shop-email").await?;
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
