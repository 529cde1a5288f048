//! The open session's client on whatsapp-rust, and the inbound durability hook that makes
//! WhatsApp's acknowledgement wait for the bot.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use botmesh_traits::{Bytes, async_trait};
use tokio::sync::{mpsc, watch};
use whatsapp_rust::prelude::{BotHandle, Client, InboundMessage, Jid};
use whatsapp_rust::{InboundDurabilityHook, UploadOptions};

use crate::error::{Error, Result};
use crate::seam::{WaAck, WaClient, WaEvent, WaFile, WaMedia, WaOutgoing, WaOutgoingBody};

use super::convert;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands each batch the library decrypted to the provider and answers the library with the
/// provider's verdict: `Ok` acknowledges the batch to WhatsApp, `Err` leaves it for
/// redelivery at the next connection (the provider refuses only once it lost the session; a
/// stop drops the answer, which refuses too).
pub(crate) struct Hook {
    tx: mpsc::UnboundedSender<WaEvent>,
}

impl Hook {
    pub(crate) fn new(tx: mpsc::UnboundedSender<WaEvent>) -> Self {
        Self { tx }
    }
}

#[async_trait]
impl InboundDurabilityHook for Hook {
    async fn on_messages(
        &self,
        client: Arc<Client>,
        batch: &[InboundMessage],
    ) -> whatsapp_rust::anyhow::Result<()> {
        let me = convert::Me::of(&client);
        let messages = batch.iter().map(|m| convert::incoming(&m.message, &m.info, &me)).collect();
        let (ack, wait) = WaAck::new();
        if self.tx.send(WaEvent::Messages { messages, ack }).is_err() {
            whatsapp_rust::anyhow::bail!("the session is closing");
        }
        if wait.accepted().await {
            Ok(())
        } else {
            whatsapp_rust::anyhow::bail!("the bot did not take the batch")
        }
    }
}

/// The client of a session whatsapp-rust runs.
pub(crate) struct RustClient {
    client: Arc<Client>,
    handle: Mutex<Option<BotHandle>>,
    /// Ends the session's events once closed.
    closed: watch::Sender<bool>,
}

impl RustClient {
    pub(crate) fn new(handle: BotHandle, closed: watch::Sender<bool>) -> Self {
        Self { client: handle.client(), handle: Mutex::new(Some(handle)), closed }
    }
}

fn jid(chat: &str) -> Result<Jid> {
    chat.parse::<Jid>()
        .map_err(|_| Error::InvalidInput { reason: format!("{chat:?} is not a JID") })
}

#[async_trait]
impl WaClient for RustClient {
    async fn send(&self, message: WaOutgoing) -> Result<String> {
        let to = jid(&message.chat)?;
        let quoted = message.quoted.as_ref();
        let wa = match &message.body {
            WaOutgoingBody::Media { kind, file, caption } => {
                let WaFile::Bytes { data, mime, file_name } = file else {
                    // The client uploads bytes; fetching a URL first is the bot's to do.
                    return Err(Error::Unsupported { what: "media by URL (send the bytes)" });
                };
                let media_type = convert::media_type(*kind);
                let up = self
                    .client
                    .upload(data.to_vec(), media_type, UploadOptions::default())
                    .await
                    .map_err(|e| Error::client("upload", e))?;
                let mime = mime.as_deref().unwrap_or("application/octet-stream");
                convert::media_message(
                    *kind,
                    &(&up).into(),
                    mime,
                    file_name.as_deref(),
                    caption.as_deref(),
                    quoted,
                )
            }
            body => {
                convert::message(body, quoted).ok_or(Error::Unsupported { what: "this message" })?
            }
        };
        let sent = self.client.send_message(to, wa).await.map_err(|e| match e {
            whatsapp_rust::SendError::NotLoggedIn => Error::NotConnected,
            whatsapp_rust::SendError::InvalidRequest(reason) => Error::InvalidInput { reason },
            e => Error::client("send", e),
        })?;
        Ok(sent.message_id)
    }

    async fn download(&self, media: &WaMedia) -> Result<Bytes> {
        let params = convert::params(&media.handle).ok_or_else(|| Error::InvalidInput {
            reason: "not a WhatsApp Web media handle".to_owned(),
        })?;
        let bytes = self.client.download_from_params(&params).await;
        bytes.map(Bytes::from).map_err(|e| Error::client("download", e))
    }

    async fn close(&self) {
        let handle = lock(&self.handle).take();
        if let Some(handle) = handle {
            handle.shutdown().await;
        }
        self.closed.send_replace(true);
    }
}
