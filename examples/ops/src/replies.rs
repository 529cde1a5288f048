//! The webhook provider with its replies printed, so a person posting with `curl` sees the
//! bot answer in the terminal (the generated chats of `--load` stay quiet).

use botmesh_core::traits::Result;
use botmesh_core::traits::{Capabilities, InboundStream, Intake, Provider, async_trait};
use botmesh_core::{Outbound, SendReceipt, TransportStatus};
use botmesh_testing::WebhookTestProvider;

use crate::load;

/// [`WebhookTestProvider`] on one replica, printing what it sends.
pub(crate) struct Replies {
    inner: WebhookTestProvider,
    replica: String,
}

impl Replies {
    pub(crate) fn new(inner: WebhookTestProvider, replica: &str) -> Self {
        Self { inner, replica: replica.to_owned() }
    }
}

#[async_trait]
impl Provider for Replies {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn capabilities(&self) -> Capabilities {
        // As the webhook's: every replica takes deliveries.
        Capabilities::shared()
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        self.inner.start(intake).await
    }

    async fn stop(&self) -> Result<()> {
        self.inner.stop().await
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let receipt = self.inner.send(message).await?;
        let chat = message.chat.as_str();
        if !load::generated(chat) {
            let text = message.text_body().unwrap_or("(not text)");
            println!("[replica {}] to {chat}: {text}", self.replica);
        }
        Ok(receipt)
    }

    fn status(&self) -> TransportStatus {
        self.inner.status()
    }
}
