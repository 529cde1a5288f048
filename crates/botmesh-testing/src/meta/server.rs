//! [`GraphServer`], the test's handle on the stand-in: it starts the HTTP server and the
//! webhook sender, reads what the bot sent and what was delivered, manages the subscribers,
//! and injects faults. Acting as the users is in `users.rs`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::channel::Channel;
use super::faults::Fault;
use super::records::{Delivery, SentMessage};
use super::signature::signature;
use super::state::{Config, Shared};
use super::{routing, webhook};

/// Builds a [`GraphServer`] with other than the default settings.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start()`"]
pub struct GraphServerBuilder {
    config: Config,
}

impl Default for GraphServerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphServerBuilder {
    /// The defaults: app secret `"botmesh-app-secret"`, verify token
    /// `"botmesh-verify-token"`, any non-empty access token accepted, API version `v21.0`,
    /// WhatsApp Business Account `"102290129340398"` with phone number id `"106540352242922"`
    /// (display number `"15550783881"`), page `"104760002345678"`, Instagram account
    /// `"17841400000000001"`, and a failed webhook delivery retried after 50 ms, doubling up
    /// to 1 s.
    pub fn new() -> Self {
        Self {
            config: Config {
                app_secret: "botmesh-app-secret".to_owned(),
                verify_token: "botmesh-verify-token".to_owned(),
                access_token: None,
                api_version: "v21.0".to_owned(),
                waba_id: "102290129340398".to_owned(),
                phone_number_id: "106540352242922".to_owned(),
                display_phone_number: "15550783881".to_owned(),
                page_id: "104760002345678".to_owned(),
                instagram_id: "17841400000000001".to_owned(),
                retry_first: Duration::from_millis(50),
                retry_max: Duration::from_secs(1),
            },
        }
    }

    /// The app secret webhook bodies are signed with.
    pub fn app_secret(mut self, secret: impl Into<String>) -> Self {
        self.config.app_secret = secret.into();
        self
    }

    /// The verify token the subscription handshake sends.
    pub fn verify_token(mut self, token: impl Into<String>) -> Self {
        self.config.verify_token = token.into();
        self
    }

    /// Accepts only this access token; any other gets `401` with code `190`.
    pub fn access_token(mut self, token: impl Into<String>) -> Self {
        self.config.access_token = Some(token.into());
        self
    }

    /// The version segment of [`GraphServer::api_url`], such as `"v21.0"`. Calls are served
    /// under any version, or none.
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.config.api_version = version.into();
        self
    }

    /// The WhatsApp Business Account id, the `entry[].id` of WhatsApp webhook bodies.
    pub fn waba_id(mut self, id: impl Into<String>) -> Self {
        self.config.waba_id = id.into();
        self
    }

    /// The WhatsApp phone number id, which sends name in their path
    /// (`/{phone_number_id}/messages`) and webhook bodies carry in `metadata`.
    pub fn phone_number_id(mut self, id: impl Into<String>) -> Self {
        self.config.phone_number_id = id.into();
        self
    }

    /// The WhatsApp number's `display_phone_number`.
    pub fn display_phone_number(mut self, number: impl Into<String>) -> Self {
        self.config.display_phone_number = number.into();
        self
    }

    /// The Facebook page id: Messenger sends go to `/{page_id}/messages`, and Messenger
    /// bodies name it in `entry[].id` and `recipient.id`.
    pub fn page_id(mut self, id: impl Into<String>) -> Self {
        self.config.page_id = id.into();
        self
    }

    /// The Instagram professional account id: Instagram sends go to `/{ig_user_id}/messages`,
    /// and Instagram bodies name it in `entry[].id` and `recipient.id`.
    pub fn instagram_id(mut self, id: impl Into<String>) -> Self {
        self.config.instagram_id = id.into();
        self
    }

    /// How a failed webhook delivery is retried: after `first`, then twice as long each
    /// time, up to `max`.
    pub fn webhook_retry(mut self, first: Duration, max: Duration) -> Self {
        self.config.retry_first = first;
        self.config.retry_max = max;
        self
    }

    /// Binds `127.0.0.1:0` and starts serving and delivering.
    pub async fn start(self) -> io::Result<GraphServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        // Plain http to loopback: no TLS stack and no proxy.
        let http = crate::http::client_builder()
            .no_proxy()
            .timeout(webhook::POST_TIMEOUT)
            .build()
            .map_err(io::Error::other)?;
        let shared = Arc::new(Shared::new(self.config, format!("http://{addr}"), http));
        let app = routing::router(Arc::clone(&shared));
        let stopped = shared.stopped();
        // Detached: serving ends by itself once the handle is dropped. An accept error ends it
        // early, and the test sees its calls refused.
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stopped).await;
        });
        let sender = tokio::spawn(webhook::run(Arc::clone(&shared)));
        Ok(GraphServer { addr, shared, sender })
    }
}

/// A local Graph API: point a Meta bot's HTTP client at [`api_url`](Self::api_url), subscribe
/// its webhook, and act as its users. See the [module docs](super) for what it implements.
///
/// Dropping it stops the server and the webhook sender.
#[derive(Debug)]
pub struct GraphServer {
    addr: SocketAddr,
    pub(super) shared: Arc<Shared>,
    sender: JoinHandle<()>,
}

impl Drop for GraphServer {
    fn drop(&mut self) {
        self.shared.close();
        self.sender.abort();
    }
}

impl GraphServer {
    /// Starts a server with the [default settings](GraphServerBuilder::new).
    pub async fn start() -> io::Result<Self> {
        GraphServerBuilder::new().start().await
    }

    /// A builder for other settings.
    pub fn builder() -> GraphServerBuilder {
        GraphServerBuilder::new()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Graph API base to give the client, with the version:
    /// `http://127.0.0.1:<port>/v21.0`. Sends go to `{api_url}/{id}/messages`.
    pub fn api_url(&self) -> String {
        format!("{}/{}", self.shared.base_url, self.shared.config.api_version)
    }

    /// The server's root, `http://127.0.0.1:<port>`, which media URLs start with.
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    /// The app secret webhook bodies are signed with.
    pub fn app_secret(&self) -> &str {
        &self.shared.config.app_secret
    }

    /// The verify token the handshake sends.
    pub fn verify_token(&self) -> &str {
        &self.shared.config.verify_token
    }

    /// The WhatsApp Business Account id.
    pub fn waba_id(&self) -> &str {
        &self.shared.config.waba_id
    }

    /// The WhatsApp phone number id.
    pub fn phone_number_id(&self) -> &str {
        &self.shared.config.phone_number_id
    }

    /// The WhatsApp number's display form.
    pub fn display_phone_number(&self) -> &str {
        &self.shared.config.display_phone_number
    }

    /// The Facebook page id.
    pub fn page_id(&self) -> &str {
        &self.shared.config.page_id
    }

    /// The Instagram account id.
    pub fn instagram_id(&self) -> &str {
        &self.shared.config.instagram_id
    }

    /// The id sends on a channel name in their path: the phone number, page or Instagram
    /// account id.
    pub fn account_id(&self, channel: Channel) -> &str {
        match channel {
            Channel::WhatsApp => self.phone_number_id(),
            Channel::Messenger => self.page_id(),
            Channel::Instagram => self.instagram_id(),
        }
    }

    // --- Reading what the bot sent ------------------------------------------------------

    /// Everything the bot sent to a user on a channel, in order. On WhatsApp, `to` is the
    /// `wa_id` (digits only).
    pub fn sent(&self, channel: Channel, to: &str) -> Vec<SentMessage> {
        let inner = self.shared.lock();
        inner.sent.iter().filter(|m| m.channel == channel && m.to == to).cloned().collect()
    }

    /// The texts (text bodies, captions, interactive bodies) the bot sent to a user on a
    /// channel, in order; sends without text are left out.
    pub fn sent_texts(&self, channel: Channel, to: &str) -> Vec<String> {
        self.sent(channel, to).into_iter().filter_map(|m| m.text).collect()
    }

    /// Everything the bot sent, on every channel, in order.
    pub fn all_sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The WhatsApp messages the bot marked as read (`"status": "read"`), in order.
    pub fn marked_read(&self) -> Vec<String> {
        self.shared.lock().marked_read.clone()
    }

    /// The bytes and MIME type of a media id: one registered by the test or uploaded by the
    /// bot.
    pub fn media(&self, media_id: &str) -> Option<(Vec<u8>, String)> {
        let inner = self.shared.lock();
        inner.media.get(media_id).map(|m| (m.bytes.clone(), m.mime_type.clone()))
    }

    // --- Faults --------------------------------------------------------------------------

    /// Answers the next send on `channel` (`POST .../messages`) with `fault` instead of
    /// running it. Each call queues one fault: queue two to fail the next two sends.
    pub fn fail_next(&self, channel: Channel, fault: Fault) {
        self.shared.update(|inner| inner.faults.entry(channel).or_default().push_back(fault));
    }

    /// Expires the access token: every call that needs one is answered `401` with code `190`
    /// and subcode `463` until [`restore_token`](Self::restore_token).
    pub fn expire_token(&self) {
        self.shared.update(|inner| inner.token_expired = true);
    }

    /// Accepts the token again after [`expire_token`](Self::expire_token).
    pub fn restore_token(&self) {
        self.shared.update(|inner| inner.token_expired = false);
    }

    // --- The webhook ---------------------------------------------------------------------

    /// Adds a replica's webhook URL. Bodies go to the subscribers round-robin, each retry to
    /// the next one; bodies queued while there are none wait for the first.
    pub fn subscribe(&self, url: impl Into<String>) {
        let url = url.into();
        self.shared.update_outbox(|inner| inner.subscribers.push(url));
    }

    /// Removes a webhook URL (every copy of it); says whether it was subscribed.
    pub fn unsubscribe(&self, url: &str) -> bool {
        self.shared.update_outbox(|inner| {
            let before = inner.subscribers.len();
            inner.subscribers.retain(|u| u != url);
            inner.subscribers.len() != before
        })
    }

    /// The subscribed webhook URLs.
    pub fn subscribers(&self) -> Vec<String> {
        self.shared.lock().subscribers.clone()
    }

    /// Performs the subscription handshake with the server's verify token: `GET
    /// url?hub.mode=subscribe&hub.verify_token=<token>&hub.challenge=<random digits>`. Says
    /// whether the answer was `200` with exactly the challenge as its body.
    pub async fn verify(&self, url: &str) -> bool {
        webhook::verify(&self.shared.http, url, &self.shared.config.verify_token).await
    }

    /// The handshake with another verify token, to check that a receiver refuses a wrong one.
    pub async fn verify_with(&self, url: &str, verify_token: &str) -> bool {
        webhook::verify(&self.shared.http, url, verify_token).await
    }

    /// Posts bytes to a webhook URL as Meta would, with `Content-Type: application/json` and
    /// `signature` as the `X-Hub-Signature-256` header if given (see [`sign`](Self::sign));
    /// returns the status, or `None` when the receiver could not be reached. Nothing is
    /// queued or recorded: this is for malformed, unsigned or forged bodies.
    pub async fn post_raw(
        &self,
        url: &str,
        body: impl Into<Vec<u8>>,
        signature: Option<&str>,
    ) -> Option<u16> {
        webhook::post_raw(&self.shared.http, url, body.into(), signature).await
    }

    /// The `X-Hub-Signature-256` value for a body, signed with the server's app secret.
    pub fn sign(&self, body: &[u8]) -> String {
        signature(&self.shared.config.app_secret, body)
    }

    /// Every delivery attempt so far, in the order they ended.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.lock().deliveries.clone()
    }

    /// How many queued bodies no subscriber has taken yet.
    pub fn pending_deliveries(&self) -> usize {
        self.shared.lock().outbox.len()
    }

    // --- Waiting -------------------------------------------------------------------------

    /// Waits until the bot has sent at least `count` messages to a user on a channel, or
    /// `within` has passed, and returns what it sent.
    pub async fn wait_for_sent(
        &self,
        channel: Channel,
        to: &str,
        count: usize,
        within: Duration,
    ) -> Vec<SentMessage> {
        self.shared
            .wait_until(within, |inner| {
                inner.sent.iter().filter(|m| m.channel == channel && m.to == to).count() >= count
            })
            .await;
        self.sent(channel, to)
    }

    /// Waits until `count` delivery attempts have ended, or `within` has passed, and returns
    /// them.
    pub async fn wait_for_deliveries(&self, count: usize, within: Duration) -> Vec<Delivery> {
        self.shared.wait_until(within, |inner| inner.deliveries.len() >= count).await;
        self.deliveries()
    }

    /// Waits until a subscriber has taken every queued body, or `within` has passed; says
    /// whether they all were.
    pub async fn wait_for_all_delivered(&self, within: Duration) -> bool {
        self.shared.wait_until(within, |inner| inner.outbox.is_empty()).await
    }
}
