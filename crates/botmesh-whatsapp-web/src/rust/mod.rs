//! The seam's real implementation, on whatsapp-rust (feature `whatsapp-rust`).
//!
//! [`WhatsAppRust`] opens a session with whatsapp-rust's `Bot`: the session's keys in SQLite
//! (`whatsapp.db` in the session directory) or in the bot's store ([`StoreBackend`]), its
//! WebSocket transport and HTTP client on rustls. Messages reach the provider through
//! whatsapp-rust's inbound durability hook, which holds WhatsApp's acknowledgement until the
//! provider answers: the provider answers once the bot took the batch (it waits for the bot
//! meanwhile), and a batch left unanswered at stop is not acknowledged, so WhatsApp delivers it
//! again at the next connection.
//!
//! `convert.rs` maps its message protobufs to the seam's model and back, `events.rs` its
//! events, `client.rs` is the open session's client and the hook, `store/` the storage in the
//! bot's store.

mod client;
mod convert;
mod events;
pub mod store;

use std::sync::Arc;

use botmesh_traits::async_trait;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use whatsapp_rust::pair_code::PairCodeOptions;
use whatsapp_rust::prelude::{Bot, Client, EventDelivery, SqliteStore};

use crate::error::{Error, Result};
use crate::seam::{Session, WaConnector, WaOpen, WaPairing, WaSession};
use whatsapp_rust::wacore::store::traits::Backend;

pub use store::StoreBackend;

/// The file the session's keys are kept in, in the session directory.
pub const DATABASE_FILE: &str = "whatsapp.db";

/// How many of the library's events may wait for the provider before the library drops one.
const EVENT_MAILBOX: usize = 4096;

/// Opens WhatsApp Web sessions with whatsapp-rust.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WhatsAppRust {}

impl WhatsAppRust {
    /// The connector, with whatsapp-rust's defaults (its WebSocket transport, its HTTP client
    /// and the tokio runtime).
    pub fn new() -> Self {
        Self {}
    }
}

#[async_trait]
impl WaConnector for WhatsAppRust {
    async fn open(&self, open: WaOpen) -> Result<WaSession> {
        let backend = backend(&open).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let on_event = {
            let tx = tx.clone();
            move |event: Arc<whatsapp_rust::prelude::Event>, client: Arc<Client>| {
                let tx = tx.clone();
                async move {
                    if let Some(event) = events::convert(&event, &convert::Me::of(&client)) {
                        let _ = tx.send(event);
                    }
                }
            }
        };
        let mut builder = Bot::builder()
            .with_backend_arc(backend)
            // In order, so that a drop and the reconnection after it are seen as they came.
            // The handler only queues, so the mailbox never fills in practice; messages do not
            // go through it but through the hook, which no drop can lose.
            .with_event_delivery(EventDelivery::Ordered { capacity: EVENT_MAILBOX })
            .on_event_for(events::KINDS, on_event)
            .with_inbound_durability_hook(client::Hook::new(tx));
        if let WaPairing::Code { phone } = &open.pairing {
            builder = builder.with_pair_code(PairCodeOptions {
                phone_number: phone.clone(),
                ..Default::default()
            });
        }
        let bot = builder.build().await.map_err(|e| Error::client("start the client", e))?;
        // The library's handlers keep their senders as long as its client lives, so the
        // stream ends when the session is closed, not when the senders go.
        let (closed_tx, mut closed) = watch::channel(false);
        let client = client::RustClient::new(bot.spawn(), closed_tx);
        let events =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
            )
            .take_until(async move {
                let _ = closed.wait_for(|closed| *closed).await;
            });
        Ok(WaSession::new(Arc::new(client), Box::pin(events.boxed())))
    }
}

/// The session's storage: SQLite in the session directory, or the bot's store.
async fn backend(open: &WaOpen) -> Result<Arc<dyn Backend>> {
    match &open.session {
        Session::Dir(dir) => {
            let db = dir.join(DATABASE_FILE);
            let url = db.to_str().ok_or_else(|| Error::InvalidInput {
                reason: format!("the session path {} is not UTF-8", db.display()),
            })?;
            let store = SqliteStore::new(url)
                .await
                .map_err(|e| Error::client("open the session store", e))?;
            Ok(Arc::new(store))
        }
        _ => {
            let store = open.store.clone().ok_or(Error::NoStore)?;
            let backend = StoreBackend::new(store, open.store_prefix(), open.guard.clone());
            Ok(Arc::new(backend))
        }
    }
}

#[cfg(test)]
mod tests;
