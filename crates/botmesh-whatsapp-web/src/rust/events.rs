//! whatsapp-rust's events to the seam's.
//!
//! Messages are not converted here: they reach the provider through the inbound durability
//! hook (see `client.rs`), which waits for the bot before WhatsApp is acknowledged. What the
//! library also dispatches as `Event::Messages` for hook-committed batches is ignored;
//! batches the hook never saw (newsletters, recovered placeholders) are forwarded, their
//! acknowledgement the library's own: the provider offers them to the bot until it takes them
//! like any other (see `pump.rs`), but one still waiting when the provider stops is lost, as
//! WhatsApp was told it arrived. The guide says so.

use whatsapp_rust::prelude::{Event, EventKind};
use whatsapp_rust::wacore::types::presence::ReceiptType;

use crate::seam::{WaAck, WaEvent, WaReceipt, WaReceiptKind};

use super::convert::{Me, incoming};

/// The kinds of events [`convert`] turns into the seam's.
pub(crate) const KINDS: &[EventKind] = &[
    EventKind::Connected,
    EventKind::Disconnected,
    EventKind::PairingQrCode,
    EventKind::PairingCode,
    EventKind::PairSuccess,
    EventKind::LoggedOut,
    EventKind::StreamReplaced,
    EventKind::TemporaryBan,
    EventKind::ClientOutdated,
    EventKind::ConnectFailure,
    EventKind::Receipt,
    EventKind::Messages,
];

/// The seam's event for a library event, if the provider cares about it; `me` is the bot.
pub(crate) fn convert(event: &Event, me: &Me) -> Option<WaEvent> {
    Some(match event {
        Event::Connected(_) => WaEvent::Connected,
        Event::PairingQrCode(qr) => WaEvent::Qr { code: qr.code.clone(), valid_for: qr.timeout },
        Event::PairingCode(code) => WaEvent::PairCode { code: code.code.clone() },
        Event::PairSuccess(ok) => WaEvent::Paired { me: ok.id.to_string() },
        Event::LoggedOut(out) => WaEvent::LoggedOut { reason: format!("{:?}", out.reason) },
        Event::StreamReplaced(_) => WaEvent::Replaced,
        Event::Disconnected(_) => WaEvent::Disconnected { reconnecting: true },
        // Refused at connect (banned, outdated, ...): the client does not get in by itself.
        Event::TemporaryBan(_) | Event::ClientOutdated(_) | Event::ConnectFailure(_) => {
            WaEvent::Disconnected { reconnecting: false }
        }
        Event::Receipt(r)
            if r.source.is_from_me
                || matches!(
                    r.r#type,
                    ReceiptType::Delivered | ReceiptType::Read | ReceiptType::Played
                ) =>
        {
            let kind = match r.r#type {
                ReceiptType::Delivered => WaReceiptKind::Delivered,
                ReceiptType::Read | ReceiptType::Played => WaReceiptKind::Read,
                _ => return None,
            };
            let mut receipt =
                WaReceipt::new(r.source.chat.to_string(), r.message_ids.clone(), kind);
            receipt.timestamp_ms = u64::try_from(r.timestamp.timestamp_millis()).unwrap_or(0);
            WaEvent::Receipt(receipt)
        }
        Event::Messages(batch) if !batch.hook_committed => {
            let messages = batch.iter().map(|m| incoming(&m.message, &m.info, me)).collect();
            // The library acknowledged these on its own path; the answer changes nothing.
            let (ack, _ignored) = WaAck::new();
            WaEvent::Messages { messages, ack }
        }
        _ => return None,
    })
}
