//! The open session's events, read on the leader: messages go to the bot, and each batch is
//! acknowledged to WhatsApp only once the bot took every message of it.
//!
//! A message the bot cannot take now (its journal is down, this replica's leases lapsed) is
//! offered again, with a growing pause, until the bot takes it: the session waits meanwhile
//! (whatsapp-rust holds the batch's acknowledgement, and the batches after it), so messages
//! reach the bot in the order they came, and none is left for a redelivery that whatsapp-rust
//! would make only at the session's next connection, behind newer ones. After the provider's
//! intake patience a warning is logged. The wait ends when the provider stops (the runtime's
//! step-down): the batch stays unacknowledged, and WhatsApp delivers it again to the replica
//! that opens the session next; or when the session's lock in the store was lost (refused, for
//! the same redelivery). What the bot can never take (too large, not a message) is reported and
//! acknowledged, so WhatsApp stops delivering it.
//!
//! Batches whatsapp-rust acknowledges by itself (newsletter messages, messages recovered from
//! placeholders: see `rust/events.rs`) are offered the same way; their acknowledgement does
//! not wait for the bot, so a stop while one waits loses it.
//!
//! Logged out, replaced by another client, or reconnecting given up: the transport is closed,
//! and a leader whose transport stays closed steps down (the runtime's `provider_down` rule),
//! so a standby can connect. A logged-out session is also reported to the bot as an error
//! event that tells the operator to pair again.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{
    ChatId, Delivery, DeliveryStatus, Inbound, Intake, MessageId, ProviderEvent, TransportStatus,
};
use futures_util::StreamExt;

use crate::events::WhatsAppEvent;
use crate::ids::message_id;
use crate::inbound::{Mapped, map};
use crate::seam::{WaEvent, WaEvents, WaIncoming, WaKey, WaReceipt, WaReceiptKind};
use crate::state::Inner;

/// The longest pause between two offers of a message the bot could not take.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Reads the session's events until they end (the session closed).
pub(crate) async fn run(inner: Arc<Inner>, mut events: WaEvents, intake: Intake) {
    while let Some(event) = events.next().await {
        match event {
            WaEvent::Connected => {
                inner.notify(&WhatsAppEvent::Connected);
                inner.connected();
            }
            WaEvent::Qr { code, .. } => inner.notify(&WhatsAppEvent::Qr { code }),
            WaEvent::PairCode { code } => inner.notify(&WhatsAppEvent::PairCode { code }),
            WaEvent::Paired { me } => inner.notify(&WhatsAppEvent::Paired { me }),
            WaEvent::Messages { messages, ack } => {
                if take_batch(&inner, &intake, &messages).await {
                    ack.accept();
                } else {
                    ack.refuse();
                }
            }
            WaEvent::Receipt(receipt) => receipts(&inner, &receipt),
            WaEvent::LoggedOut { reason } => {
                inner.set_status(TransportStatus::Closed);
                let said = format!(
                    "the WhatsApp Web session of provider {} was logged out ({reason}); pair the device again",
                    inner.id
                );
                inner.report(ProviderEvent::Rejected { reason: said });
                inner.notify(&WhatsAppEvent::LoggedOut { reason });
            }
            WaEvent::Replaced => {
                tracing::warn!(target: "botmesh", provider = inner.id, "another client opened this WhatsApp Web session; the transport is closed");
                inner.set_status(TransportStatus::Closed);
                inner.notify(&WhatsAppEvent::Replaced);
            }
            WaEvent::Disconnected { reconnecting } => {
                inner.set_status(TransportStatus::Closed);
                if !reconnecting {
                    tracing::warn!(target: "botmesh", provider = inner.id, "the WhatsApp Web client gave up reconnecting; the transport is closed");
                    inner.notify(&WhatsAppEvent::GaveUp);
                }
            }
        }
    }
    inner.set_status(TransportStatus::Closed);
}

/// Hands a batch to the bot in order. `false` when the session's lock was lost before the bot
/// took every message: the batch is then left for WhatsApp to deliver again, whole (what was
/// taken of it is dropped by the bot's dedupe then).
async fn take_batch(inner: &Inner, intake: &Intake, messages: &[WaIncoming]) -> bool {
    for m in messages {
        match map(&inner.id, m) {
            Mapped::Skip => {}
            Mapped::Event(event) => inner.notify(&event),
            Mapped::Message(inbound) => {
                if !hand_over(inner, intake, inbound).await {
                    return false;
                }
            }
        }
    }
    true
}

/// Offers one message to the bot until it takes it. `true` when it was taken, or can never be
/// (reported, and acknowledged so WhatsApp stops); `false` only when the session's lock was
/// lost meanwhile. A stop ends the wait by stopping the pump.
async fn hand_over(inner: &Inner, intake: &Intake, inbound: Inbound) -> bool {
    let warn_at = tokio::time::Instant::now() + inner.settings.patience;
    let mut warned = false;
    let mut backoff = Duration::from_millis(50);
    loop {
        let verdict = intake.accept(inbound.clone()).await;
        if verdict.is_taken() {
            if warned {
                tracing::info!(target: "botmesh", provider = inner.id, message = %inbound.id, "the bot took the message it could not take before");
            }
            return true;
        }
        if verdict.status() != 503 {
            let reason = format!("message {} refused by the bot: {verdict}", inbound.id);
            inner.report(ProviderEvent::Rejected { reason });
            return true;
        }
        if inner.is_lost() {
            tracing::warn!(target: "botmesh", provider = inner.id, message = %inbound.id, "the session's lock was lost before the bot took a message; WhatsApp delivers it again");
            return false;
        }
        if !warned && tokio::time::Instant::now() >= warn_at {
            warned = true;
            tracing::warn!(target: "botmesh", provider = inner.id, message = %inbound.id, "the bot cannot take a message now; it is offered again until it can, and the session waits");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn receipts(inner: &Inner, receipt: &WaReceipt) {
    let status = match receipt.kind {
        WaReceiptKind::Delivered => DeliveryStatus::Delivered,
        WaReceiptKind::Read => DeliveryStatus::Read,
    };
    for id in &receipt.ids {
        let key = WaKey::new(receipt.chat.clone(), id.clone()).mine();
        let mut delivery = Delivery::new(
            ChatId::from(receipt.chat.as_str()),
            MessageId::from(message_id(&key)),
            status,
        );
        delivery.timestamp_ms = receipt.timestamp_ms;
        inner.report(ProviderEvent::Delivery(delivery));
    }
}
