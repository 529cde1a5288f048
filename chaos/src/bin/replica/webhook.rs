//! The shared transport: a webhook endpoint every replica serves. A delivery goes through the
//! bot's intake, whose verdict is the HTTP answer; replies go to the platform API.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use botmesh_chaos::record::{Delivery, PROVIDER, chat_id, message_id, now_ns};
use botmesh_core::traits::{
    Capabilities, InboundStream, Intake, Provider, ProviderEvent, async_trait,
};
use botmesh_core::{Inbound, Outbound, SendReceipt, TransportStatus};
use botmesh_traits::webhook::IntakeSlot;
use futures_util::StreamExt;

use crate::log::Log;
use crate::platform::Platform;

/// The webhook transport: messages arrive on the HTTP endpoint and go through the bot's intake,
/// which says what to answer the sender; sends go to the platform API.
pub(crate) struct Webhook {
    pub(crate) platform: Platform,
    pub(crate) slot: IntakeSlot,
}

#[async_trait]
impl Provider for Webhook {
    fn id(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::shared()
    }

    async fn start(&self, intake: Intake) -> botmesh_core::traits::Result<InboundStream> {
        // Deliveries reach the bot through the intake; the stream only reports the status and
        // ends on stop.
        self.slot.open(intake);
        let open =
            futures_util::stream::once(async { ProviderEvent::Status(TransportStatus::Open) });
        let end = futures_util::stream::once(self.slot.closed()).filter_map(|()| async { None });
        Ok(Box::pin(open.chain(end)))
    }

    async fn stop(&self) -> botmesh_core::traits::Result<()> {
        self.slot.close();
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> botmesh_core::traits::Result<SendReceipt> {
        self.platform.send(PROVIDER, message).await
    }

    fn status(&self) -> TransportStatus {
        TransportStatus::Open
    }
}

/// Serves one delivery: the bot's verdict is the answer.
pub(crate) async fn webhook(
    State((slot, log)): State<(IntakeSlot, Log)>,
    Json(d): Json<Delivery>,
) -> Response {
    let inbound = Inbound::text(PROVIDER, message_id(d.chat, d.seq), chat_id(d.chat), d.body);
    let verdict = slot.accept(inbound).await;
    if verdict.is_taken() {
        log.accepted(d.chat, d.seq, now_ns());
    } else {
        tracing::warn!(verdict = %verdict, "refused a delivery; the sender retries");
    }
    verdict.into_response()
}
