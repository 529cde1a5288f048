//! `TelegramProvider`: its two modes, starting and stopping, and sending.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use botmesh_traits::webhook::Limits;
use botmesh_traits::{
    Bytes, Capabilities, Error, InboundStream, Intake, Media, MessageId, Outbound, Provider,
    Result, SendReceipt, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use teloxide_core::net::Download;
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::{FileId, ParseMode};
use teloxide_core::{Bot, RequestError};
use tokio::sync::{mpsc, watch};

use crate::errors::{is_transient, typed};
use crate::inbound::message_id;
use crate::outbound::{self, Failure};
use crate::polling;
use crate::state::{Inner, Mode, Poller, Settings, lock};

/// How long a stop waits for the polling loop to record what it handed to the bot: a store
/// write. Past it, the loop is aborted.
const POLLER_STOP: Duration = Duration::from_secs(5);

/// A Telegram bot as a botmesh provider.
///
/// Two modes, as Telegram offers them:
/// - [`polling`](Self::polling): the provider asks for updates (`getUpdates`). Telegram allows
///   one poller per bot token, so the session is exclusive: with several replicas only the
///   elected one polls, and a standby takes over if it dies. The offset lives in the bot's
///   store, so the new poller resumes after the last update the old one handed to the bot.
/// - [`webhook`](Self::webhook): Telegram posts updates to your HTTPS endpoint; every replica
///   serves it behind your load balancer. Mount [`router`](Self::router) in your axum server.
///   An update is answered `200` only once the bot took it, so Telegram retries what a crash
///   interrupted.
///
/// Clones share one connection.
#[derive(Clone)]
pub struct TelegramProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for TelegramProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("TelegramProvider")
            .field("id", &self.inner.id)
            .field(
                "mode",
                &matches!(self.inner.mode, Mode::Polling { .. })
                    .then_some("polling")
                    .unwrap_or("webhook"),
            )
            .finish_non_exhaustive()
    }
}

impl TelegramProvider {
    fn with_mode(token: impl Into<String>, mode: Mode) -> Self {
        let settings = Settings {
            id: "telegram".to_owned(),
            bot: Bot::new(token),
            mode,
            parse_mode: None,
            limits: Limits::new(),
        };
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// Long polling with the bot token `token`: an exclusive session.
    pub fn polling(token: impl Into<String>) -> Self {
        Self::with_mode(token, Mode::Polling { timeout: Duration::from_secs(10) })
    }

    /// Webhooks with the bot token `token`: Telegram posts to `public_url` (HTTPS, where your
    /// server mounts [`router`](Self::router)), with `secret` in the
    /// `X-Telegram-Bot-Api-Secret-Token` header. A shared session.
    pub fn webhook(
        token: impl Into<String>,
        public_url: url::Url,
        secret: impl Into<String>,
    ) -> Self {
        let secret: String = secret.into();
        Self::with_mode(token, Mode::Webhook { url: public_url, secret: Arc::from(secret) })
    }

    /// Changes a setting. Settings are made before the provider is started; a clone made
    /// before keeps the old ones.
    fn rebuild(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.inner.settings();
        f(&mut settings);
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// The provider's id (`telegram` by default): give two Telegram bots in one botmesh bot
    /// different ids.
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.rebuild(|i| i.id = id)
    }

    /// Where the Bot API is served: `https://api.telegram.org` by default; a local Bot API
    /// server, or the stand-in of `botmesh-testing` in tests.
    #[must_use]
    pub fn with_api_url(self, url: url::Url) -> Self {
        self.rebuild(|i| i.bot = i.bot.clone().set_api_url(url))
    }

    /// How Telegram formats the text of every message sent: HTML or MarkdownV2. Plain text by
    /// default.
    #[must_use]
    pub fn with_parse_mode(self, mode: ParseMode) -> Self {
        self.rebuild(|i| i.parse_mode = Some(mode))
    }

    /// How long each `getUpdates` waits for updates (10 s by default). Polling only.
    #[must_use]
    pub fn with_poll_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|i| {
            if let Mode::Polling { timeout: t } = &mut i.mode {
                *t = timeout;
            }
        })
    }

    /// Bounds on each webhook request (1 MiB bodies and 10 s by default). Webhooks only.
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        self.rebuild(|i| i.limits = limits)
    }

    /// The teloxide client this provider calls the Bot API with, for calls of your own. It holds
    /// the token: keep it out of logs (its `Debug` output shows it).
    pub fn client(&self) -> &Bot {
        &self.inner.bot
    }

    /// Asks `getMe` for the bot's username, so that `/command@username` is recognized.
    async fn who_am_i(&self) -> Result<()> {
        let me = self.inner.bot.get_me().send().await;
        let me = me.map_err(|e| typed(&self.inner.id, "getMe", None, e))?;
        *lock(&self.inner.username) = me.user.username.clone();
        Ok(())
    }
}

#[async_trait]
impl Provider for TelegramProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        match self.inner.mode {
            Mode::Polling { .. } => Capabilities::exclusive(),
            Mode::Webhook { .. } => Capabilities::shared(),
        }
        .with_buttons(true)
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let inner = &self.inner;
        self.who_am_i().await?;
        match &inner.mode {
            Mode::Polling { .. } => {
                // A webhook left set would make every getUpdates a conflict.
                let deleted = inner.bot.delete_webhook().send().await;
                deleted.map_err(|e| typed(&inner.id, "deleteWebhook", None, e))?;
            }
            Mode::Webhook { url, secret } => {
                // The same updates a poller asks for, whatever the bot was set to before.
                let set = inner
                    .bot
                    .set_webhook(url.clone())
                    .secret_token(secret.to_string())
                    .allowed_updates(polling::allowed());
                set.send().await.map_err(|e| typed(&inner.id, "setWebhook", None, e))?;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&inner.events) = Some(tx);
        inner.slot.open(intake.clone());
        inner.set_status(TransportStatus::Open);
        if let Mode::Polling { timeout } = inner.mode {
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(polling::run(Arc::clone(inner), intake, timeout, stopped));
            if let Some(old) = lock(&inner.poller).replace(Poller { task, stop }) {
                old.task.abort();
            }
        }
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        });
        Ok(Box::pin(stream.boxed()))
    }

    async fn stop(&self) -> Result<()> {
        let inner = &self.inner;
        let poller = lock(&inner.poller).take();
        if let Some(poller) = poller {
            // The loop hands each update to the bot before it records the offset: it stops
            // after the two, or the next poller would get the update again, which only the
            // journal (with durability) tells from a new one after a restart.
            poller.stop(POLLER_STOP).await;
        }
        inner.slot.close();
        *lock(&inner.status) = TransportStatus::Closed;
        // Ends the stream. A webhook stays set: the other replicas still serve it.
        lock(&inner.events).take();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let inner = &self.inner;
        let chat = outbound::target(message.chat.as_str()).ok().map(|t| t.chat.0);
        inner.pauses.wait(chat).await;
        let attempt = || outbound::send(&inner.bot, inner.parse_mode, message);
        // Telegram failing on its side (5xx) or the network: tried again with backoff. A 429
        // goes back to the bot, which waits as long as Telegram asked.
        let sent = attempt
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(200))
                    .with_max_times(3),
            )
            .when(|f| matches!(f, Failure::Platform(e) if is_transient(e)))
            .await;
        match sent {
            Ok(Some(m)) => Ok(SendReceipt::new(Some(MessageId::from(message_id(&m.chat, m.id.0))))),
            Ok(None) => Ok(SendReceipt::new(None)),
            Err(Failure::Refused(e)) => Err(e),
            Err(Failure::Platform(e)) => {
                if let RequestError::RetryAfter(wait) = &e {
                    inner.pauses.pause(chat, wait.duration());
                }
                Err(typed(&inner.id, "send", Some(message.chat.as_str()), e))
            }
        }
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }

    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let inner = &self.inner;
        let file = inner.bot.get_file(FileId(media.url.clone())).send().await;
        let file = file.map_err(|e| typed(&inner.id, "getFile", None, e))?;
        let mut bytes =
            Vec::with_capacity(usize::try_from(file.meta.size).unwrap_or(0).min(1 << 24));
        let downloaded = inner.bot.download_file(&file.path, &mut bytes).await;
        downloaded.map_err(|e| Error::provider(&inner.id, "download", e))?;
        Ok(Bytes::from(bytes))
    }
}
