//! `EmailProvider`: its two modes, starting and stopping, sending and fetching mail parts.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::webhook::Limits;
use botmesh_traits::{
    Bytes, Capabilities, Error, InboundStream, Intake, Media, MessageId, Outbound, Provider,
    Result, SendReceipt, Store, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::config::{ImapConfig, SmtpConfig, Threading};
use crate::imap::client::Client;
use crate::imap::{conn, session};
use crate::media::{self, Part};
use crate::smtp::Smtp;
use crate::state::{Check, Inner, Mode, Running, Settings, lock};

/// A mailbox as a botmesh provider.
///
/// Two modes:
/// - [`imap`](Self::imap): one IMAP session reads the mailbox (IDLE, or polling on servers
///   without it). Two sessions would hand every mail over twice, so the session is exclusive:
///   with several replicas only the elected one runs it, and a standby takes over where it
///   stopped (the position lives in the bot's store).
/// - [`ingest`](Self::ingest): a mail service posts each raw mail to [`router`](Self::router),
///   on every replica behind a load balancer.
///
/// Both send through SMTP. Clones share one provider.
#[derive(Clone)]
pub struct EmailProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for EmailProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a password or the ingest secret.
        let mode = match &self.inner.settings.mode {
            Mode::Imap(_) => "imap",
            Mode::Ingest { .. } => "ingest",
        };
        f.debug_struct("EmailProvider")
            .field("id", &self.inner.id)
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

impl EmailProvider {
    fn with_mode(mode: Mode, smtp: SmtpConfig) -> Self {
        let settings = Settings {
            id: "email".to_owned(),
            mode,
            smtp,
            threading: Threading::Correspondent,
            limits: Limits::new().max_body_bytes(10 * 1024 * 1024),
            retention: Duration::from_secs(7 * 24 * 60 * 60),
            stop_timeout: Duration::from_secs(2),
            store: None,
        };
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// Reads the mailbox `imap` describes over one IMAP session (exclusive), and sends through
    /// `smtp`.
    pub fn imap(imap: ImapConfig, smtp: SmtpConfig) -> Self {
        Self::with_mode(Mode::Imap(Box::new(imap)), smtp)
    }

    /// Takes raw mails posted to [`router`](Self::router) with `secret` in the
    /// [`SECRET_HEADER`](crate::SECRET_HEADER) header (shared: every replica serves it), and
    /// sends through `smtp`. See [`with_hmac`](Self::with_hmac) for signed bodies instead.
    pub fn ingest(secret: &str, smtp: SmtpConfig) -> Self {
        let check = Check::Secret(Arc::from(secret.as_bytes()));
        Self::with_mode(Mode::Ingest { check, path: "/email".to_owned() }, smtp)
    }

    /// Changes a setting. Settings are made before the provider is started.
    fn rebuild(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.inner.settings.clone();
        f(&mut settings);
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// The provider's id (`email` by default): give two mailboxes in one bot different ids.
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.rebuild(|s| s.id = id)
    }

    /// How mails make chats ([`Threading::Correspondent`] by default).
    #[must_use]
    pub fn with_threading(self, threading: Threading) -> Self {
        self.rebuild(|s| s.threading = threading)
    }

    /// Ingest only: requests carry `sha256=<hex>`, the HMAC-SHA256 of the body under `key`,
    /// in [`SIGNATURE_HEADER`](crate::SIGNATURE_HEADER), instead of the secret itself.
    #[must_use]
    pub fn with_hmac(self, key: &str) -> Self {
        let key: Arc<[u8]> = Arc::from(key.as_bytes());
        self.rebuild(|s| {
            if let Mode::Ingest { check, .. } = &mut s.mode {
                *check = Check::Hmac(key);
            }
        })
    }

    /// Ingest only: the path the endpoint is served at (`/email` by default).
    #[must_use]
    pub fn with_path(self, path: impl Into<String>) -> Self {
        let new = path.into();
        self.rebuild(|s| {
            if let Mode::Ingest { path, .. } = &mut s.mode {
                *path = new;
            }
        })
    }

    /// Bounds on each ingest request (10 MiB bodies and 10 s by default).
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        self.rebuild(|s| s.limits = limits)
    }

    /// How long the provider keeps each mail in the store, for threading replies and for
    /// `fetch_media` (seven days by default).
    #[must_use]
    pub fn with_retention(self, retention: Duration) -> Self {
        self.rebuild(|s| s.retention = retention)
    }

    /// How long `stop` waits for the IMAP session to leave IDLE and log out before it drops
    /// the connection (2 seconds by default; each of the two steps gets half). A leader that
    /// is told to stop because it lost its lease has `lease / 3` to let go before a standby
    /// may select the mailbox (5 seconds with the default 15 second lease): keep this well
    /// under that, so that two sessions never read the mailbox at once.
    #[must_use]
    pub fn with_stop_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|s| s.stop_timeout = timeout)
    }

    /// Keeps mails in `store` (for threading and `fetch_media`) rather than in the bot's
    /// store, which the provider otherwise adopts when it starts. Give it on replicas that
    /// send without running the session, or outside a bot.
    #[must_use]
    pub fn with_store(self, store: Arc<dyn Store>) -> Self {
        self.rebuild(|s| s.store = Some(store))
    }

    /// The message id of the mail from `from` with `Message-ID` `message_id` (angle brackets
    /// optional): not the `Message-ID` itself, which the sender chooses, but a digest of it
    /// and the sender's lowercased address (the hex of the first 16 bytes of the SHA-256 of
    /// `address`, a newline and the `Message-ID`). Give it to [`whole_mail`](Self::whole_mail)
    /// and the like.
    pub fn message_id(from: &str, message_id: &str) -> MessageId {
        let bare = message_id.trim().trim_start_matches('<').trim_end_matches('>');
        MessageId::from(crate::parse::message_key(&from.trim().to_lowercase(), bare))
    }

    /// The media of the whole mail `id` (RFC 822), for [`Provider::fetch_media`].
    pub fn whole_mail(id: &MessageId) -> Media {
        Media::new(format!("email:{id}")).with_mime("message/rfc822")
    }

    /// The media of the HTML body of mail `id`, for [`Provider::fetch_media`].
    pub fn html(id: &MessageId) -> Media {
        Media::new(format!("email:{id}/html")).with_mime("text/html")
    }

    /// The media of the whole plain text of mail `id` (quote and signature included).
    pub fn full_text(id: &MessageId) -> Media {
        Media::new(format!("email:{id}/text")).with_mime("text/plain")
    }

    fn smtp(&self) -> Result<&Smtp> {
        let smtp = self.inner.smtp.get_or_init(|| Smtp::new(&self.inner.settings.smtp));
        smtp.as_ref().map_err(|reason| Error::Configuration(reason.clone().into()))
    }
}

#[async_trait]
impl Provider for EmailProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        match self.inner.settings.mode {
            Mode::Imap(_) => Capabilities::exclusive(),
            Mode::Ingest { .. } => Capabilities::shared(),
        }
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let inner = &self.inner;
        inner.archive.adopt(intake.store());
        // A configuration error shows at start, not at the first reply.
        self.smtp()?;
        let (tx, rx) = mpsc::unbounded_channel();
        match &inner.settings.mode {
            Mode::Imap(config) => {
                // Logged in before start returns, so a wrong password fails the start.
                let session = conn::login(&inner.id, config).await?;
                let mut first = Client::new(session, config.command_timeout);
                // And the mailbox selected: a mailbox that does not exist fails it too. A
                // server that did not answer, or a lost connection, is a retryable error.
                if let Err(e) = first.select(&config.mailbox).await {
                    let refused = e.is_refusal();
                    let reason = format!("mailbox {:?} cannot be selected: {e}", config.mailbox);
                    if !refused {
                        return Err(e.into_error(&inner.id));
                    }
                    first.logout(config.command_timeout).await;
                    return Err(Error::Configuration(reason.into()));
                }
                *lock(&inner.events) = Some(tx);
                let (stop, stopped) = watch::channel(false);
                let task = tokio::spawn(session::run(
                    Arc::clone(inner),
                    (**config).clone(),
                    intake,
                    first,
                    stopped,
                ));
                if let Some(old) = lock(&inner.running).replace(Running { task, stop }) {
                    old.task.abort();
                }
            }
            Mode::Ingest { .. } => {
                *lock(&inner.events) = Some(tx);
                inner.slot.open(intake);
                inner.set_status(TransportStatus::Open);
            }
        }
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        });
        Ok(Box::pin(stream.boxed()))
    }

    async fn stop(&self) -> Result<()> {
        let inner = &self.inner;
        let running = lock(&inner.running).take();
        if let Some(Running { mut task, stop }) = running {
            // The loop leaves IDLE and logs out. A mail handed to the bot but not yet flagged
            // is offered again by the next session, and the bot's dedupe drops it.
            let _ = stop.send(true);
            let wait = inner.settings.stop_timeout;
            if tokio::time::timeout(wait, &mut task).await.is_err() {
                task.abort();
                let _ = task.await;
            }
        }
        inner.slot.close();
        *lock(&inner.status) = TransportStatus::Closed;
        // Ends the stream.
        lock(&inner.events).take();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let smtp = self.smtp()?;
        let inner = &self.inner;
        let parent = match &message.reply_to {
            Some(id) => inner.archive.mail(id.as_str()).await,
            None => None,
        };
        let parent = match parent {
            Some(p) => Some(p),
            None => inner.archive.last_in(message.chat.as_str()).await,
        };
        let id = smtp.send(&inner.id, &inner.settings.smtp, message, parent.as_ref()).await?;
        Ok(SendReceipt::new(Some(MessageId::from(id))))
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }

    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let Some((id, part)) = media::parse_url(&media.url) else {
            return Err(Error::InvalidInput {
                reason: format!("{:?} is not a mail part", media.url),
            });
        };
        let gone =
            || Error::InvalidInput { reason: format!("no kept mail has part {:?}", media.url) };
        let kept = self.inner.archive.mail(id).await.ok_or_else(gone)?;
        let raw = kept.raw().ok_or_else(gone)?;
        let bytes = if part == Part::Raw { Some(raw) } else { media::extract(&raw, &part) };
        bytes.map(Bytes::from).ok_or_else(gone)
    }
}
