//! `DiscordProvider`: its settings, starting and stopping the gateway, and sending.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use botmesh_traits::{
    Bytes, Capabilities, Error, InboundStream, Intake, Media, Outbound, Provider, Result,
    SendReceipt, TransportStatus, async_trait,
};
use futures_util::StreamExt;
use serenity::model::gateway::GatewayIntents;
use tokio::sync::mpsc;

use crate::gateway;
use crate::handing;
use crate::outbound;
use crate::state::{Handing, Inner, Settings, lock};

/// The longest `stop` waits for the gateway task beyond the close timeout: its teardown is
/// quick, so this only bounds a stop that something unforeseen holds up.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The largest attachment [`fetch_media`](Provider::fetch_media) downloads: Discord's upload
/// limit for the largest boosted servers.
const MAX_MEDIA: u64 = 500 * 1024 * 1024;

/// How many gateway events wait for the bot at most, by default.
const QUEUE_LIMIT: usize = 1024;

/// A Discord bot as a botmesh provider, on one gateway session.
///
/// Discord delivers every event of a shard to each session that holds it, so two processes
/// connected with one token both receive every message: the session is exclusive. With
/// several replicas only the elected one connects, and a standby connects when it dies or
/// steps down. See the [crate docs](crate) for the mapping and the transport's status.
///
/// Clones share one connection.
#[derive(Clone)]
pub struct DiscordProvider {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for DiscordProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("DiscordProvider")
            .field("id", &self.inner.settings.id)
            .field("intents", &self.inner.settings.intents)
            .field("proxy", &self.inner.settings.proxy)
            .finish_non_exhaustive()
    }
}

impl DiscordProvider {
    /// A bot with token `token` that asks the gateway for `intents`.
    ///
    /// Defaults: the id `discord`; API calls go to Discord itself, through serenity's
    /// ratelimiter; a stop waits up to 1 s for a clean close. Guild messages need the
    /// privileged `MESSAGE_CONTENT` intent for their text (turn it on in the developer portal);
    /// [`DiscordProvider::default_intents`] lists what the mapping uses.
    pub fn new(token: impl Into<String>, intents: GatewayIntents) -> Self {
        let token: String = token.into();
        let settings = Settings {
            id: "discord".to_owned(),
            token: Arc::from(token.strip_prefix("Bot ").unwrap_or(&token)),
            intents,
            proxy: None,
            close_timeout: Duration::from_secs(1),
            queue_limit: QUEUE_LIMIT,
        };
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// The intents the mapping uses: guild and direct messages, their content, and reactions
    /// in both.
    pub fn default_intents() -> GatewayIntents {
        crate::errors::default_intents()
    }

    /// Changes a setting. Settings are made before the provider is started; a clone made
    /// before keeps the old ones.
    fn rebuild(self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.inner.settings.clone();
        f(&mut settings);
        Self { inner: Arc::new(Inner::new(settings)) }
    }

    /// The provider's id (`discord` by default): give two Discord bots in one botmesh bot
    /// different ids.
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.rebuild(|s| s.id = id)
    }

    /// Sends every API call to `proxy` (`http://host:port`) instead of `https://discord.com`:
    /// an HTTP proxy that rate-limits for several processes, or the Discord stand-in of
    /// `botmesh-testing` in tests. The gateway's URL comes from the proxy's `/gateway/bot`
    /// answer. serenity's own ratelimiter is off then (it cannot reach a proxy): a `429` comes
    /// back to the bot as [`Error::RateLimited`], which waits and sends again.
    #[must_use]
    pub fn with_proxy(self, proxy: impl Into<String>) -> Self {
        let proxy = proxy.into();
        self.rebuild(|s| s.proxy = Some(proxy))
    }

    /// How long a stop (or a step-down) waits for the websocket to close cleanly, with close
    /// code 1000, before it drops the connection (1 s by default). Either way the session is
    /// closed when the stop returns. serenity reads its mailbox between two frames, up to half a
    /// second apart, so a clean close may take that long; keep this well under a third of the
    /// coordination lease, the time a stalled replica has to let its transport go before a
    /// standby may connect.
    ///
    /// Once the session is closed, the stop waits as long again at most for the messages
    /// already read from the gateway to be taken by the bot; what is left then is dropped and
    /// reported (a warning with their ids and a [`ProviderEvent::Rejected`]).
    ///
    /// [`ProviderEvent::Rejected`]: botmesh_traits::ProviderEvent::Rejected
    #[must_use]
    pub fn with_close_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|s| s.close_timeout = timeout)
    }

    /// How many gateway events may wait for the bot to take them (1024 by default, at least
    /// one; a message with several attachments is one event). They wait while the bot cannot
    /// take a message now (its journal is down): Discord never delivers a message again, so
    /// it is offered again and again. When that many wait, a new event is dropped and
    /// reported (a warning with its ids and a [`ProviderEvent::Rejected`]) instead of holding
    /// ever more memory.
    ///
    /// [`ProviderEvent::Rejected`]: botmesh_traits::ProviderEvent::Rejected
    #[must_use]
    pub fn with_queue_limit(self, events: usize) -> Self {
        self.rebuild(|s| s.queue_limit = events.max(1))
    }

    /// The serenity HTTP client this provider calls the API with, for calls of your own
    /// (registering slash commands, say).
    pub fn http(&self) -> &Arc<serenity::http::Http> {
        &self.inner.http
    }
}

#[async_trait]
impl Provider for DiscordProvider {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn capabilities(&self) -> Capabilities {
        // The gateway never sends an event again: what the bot refused would be gone.
        Capabilities::exclusive().with_buttons(true).with_delivers_once(true)
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let inner = &self.inner;
        // A wrong token fails the start, not a background loop.
        let me = inner.http.get_current_user().await;
        let me = me.map_err(|e| crate::errors::typed(inner.id(), "start", "", e))?;
        *lock(&inner.me) = Some(me.id.get());
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        *lock(&inner.events) = Some(events_tx);
        lock(&inner.gateway).stopping = false;
        inner.stale.store(false, Ordering::SeqCst);
        inner.revoked.store(false, Ordering::SeqCst);
        inner.stop.send_replace(false);
        let (arrivals_tx, arrivals_rx) = mpsc::channel(inner.settings.queue_limit);
        let (drain, drained) = tokio::sync::oneshot::channel();
        let supervisor = tokio::spawn(gateway::supervise(Arc::clone(inner), arrivals_tx));
        let task =
            tokio::spawn(handing::hand_over(Arc::clone(inner), intake, arrivals_rx, drained));
        if let Some(old) = lock(&inner.supervisor).replace(supervisor) {
            old.abort();
        }
        if let Some(old) = lock(&inner.handing).replace(Handing { task, drain }) {
            old.task.abort();
        }
        let stream = futures_util::stream::unfold(events_rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        });
        Ok(Box::pin(stream.boxed()))
    }

    async fn stop(&self) -> Result<()> {
        let inner = &self.inner;
        let messenger = {
            let mut gateway = lock(&inner.gateway);
            gateway.stopping = true;
            gateway.messenger.take()
        };
        inner.stop.send_replace(true);
        if let Some(messenger) = messenger {
            // A clean close (1000): Discord ends the session, and the next leader's IDENTIFY
            // never meets this one.
            messenger.send_to_shard(serenity::gateway::ShardRunnerMessage::Shutdown(
                serenity::model::id::ShardId(0),
                1000,
            ));
        }
        let supervisor = lock(&inner.supervisor).take();
        if let Some(mut supervisor) = supervisor {
            let wait = inner.settings.close_timeout + STOP_WAIT;
            if tokio::time::timeout(wait, &mut supervisor).await.is_err() {
                // Closing took too long: dropping the task drops the socket with it.
                supervisor.abort();
                let _ = supervisor.await;
            }
        }
        // The session is closed: nothing arrives any more. What was read from the gateway
        // and not taken yet is handed to the bot for another close timeout at most; what is
        // left then is reported dropped.
        let handing = lock(&inner.handing).take();
        if let Some(Handing { mut task, drain }) = handing {
            let deadline = tokio::time::Instant::now() + inner.settings.close_timeout;
            let _ = drain.send(deadline);
            // The task ends by the deadline by itself: this only bounds the unforeseen.
            let wait = inner.settings.close_timeout + STOP_WAIT;
            if tokio::time::timeout(wait, &mut task).await.is_err() {
                task.abort();
                let _ = task.await;
            }
        }
        inner.stale.store(false, Ordering::SeqCst);
        inner.set_status(TransportStatus::Closed);
        lock(&inner.events).take();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let sent = outbound::send(&self.inner, message).await;
        if let Err(Error::Unauthorized { .. }) = &sent {
            self.inner.token_refused("a send");
        }
        sent
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }

    async fn fetch_media(&self, media: &Media) -> Result<Bytes> {
        let inner = &self.inner;
        let failed = |e: reqwest::Error| Error::provider(inner.id(), "download", e);
        // Attachment URLs are signed links on Discord's CDN: fetched without the token.
        let response = inner.client.get(&media.url).send().await.map_err(failed)?;
        let response = response.error_for_status().map_err(failed)?;
        let limit = usize::try_from(MAX_MEDIA).unwrap_or(usize::MAX);
        let too_large = |size: usize| Error::TooLarge { what: "an attachment".into(), size, limit };
        if let Some(size) = response.content_length().filter(|s| *s > MAX_MEDIA) {
            return Err(too_large(usize::try_from(size).unwrap_or(usize::MAX)));
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > limit {
                return Err(too_large(bytes.len()));
            }
        }
        Ok(Bytes::from(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_token() {
        let provider = DiscordProvider::new("Bot s3cr3t-token", DiscordProvider::default_intents())
            .with_id("shop")
            .with_proxy("http://127.0.0.1:9");
        let shown = format!("{provider:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("shop") && shown.contains("127.0.0.1:9"), "{shown}");
        assert!(provider.capabilities().exclusive_session);
        assert_eq!(provider.status(), TransportStatus::Closed);
    }
}
