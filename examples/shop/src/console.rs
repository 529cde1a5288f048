//! A provider that chats through the terminal: stdin lines in, stdout lines out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use botmesh_core::traits::Result;
use botmesh_core::traits::{
    Capabilities, InboundStream, Intake, Provider, ProviderEvent, async_trait,
};
use botmesh_core::{Inbound, MessageId, Outbound, OutboundContent, SendReceipt, TransportStatus};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// The terminal as a chat: every line typed is a message from the chat `console`.
#[derive(Clone, Debug, Default)]
pub struct ConsoleProvider {
    open: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
}

/// The chat id of the person at the terminal.
pub const CHAT: &str = "console";

impl ConsoleProvider {
    /// A console provider.
    pub fn new() -> Self {
        Self::default()
    }
}

fn render(content: &OutboundContent) -> String {
    match content {
        OutboundContent::Buttons { body, buttons } => {
            let mut out = body.clone();
            for (i, b) in buttons.iter().enumerate() {
                out.push_str(&format!("\n  {}. {}", i + 1, b.title));
            }
            out
        }
        other => {
            Outbound::new(CHAT, other.clone()).text_body().unwrap_or("[attachment]").to_owned()
        }
    }
}

#[async_trait]
impl Provider for ConsoleProvider {
    fn id(&self) -> &str {
        "console"
    }

    fn capabilities(&self) -> Capabilities {
        // There is one terminal: only one process may read it.
        Capabilities::exclusive()
    }

    async fn start(&self, _intake: Intake) -> Result<InboundStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.open.store(true, Ordering::SeqCst);
        let open = Arc::clone(&self.open);
        tokio::spawn(async move {
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            let mut n = 0u64;
            // Read until end of input; a read error ends the session like end of input.
            while let Ok(Some(line)) = lines.next_line().await {
                n += 1;
                let msg = Inbound::text("console", format!("line-{n}"), CHAT, line.trim_end());
                if tx.send(ProviderEvent::Message(msg)).is_err() {
                    break;
                }
            }
            open.store(false, Ordering::SeqCst);
        });
        Ok(Box::pin(UnboundedReceiverStream::new(rx)))
    }

    async fn stop(&self) -> Result<()> {
        self.open.store(false, Ordering::SeqCst);
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let text = format!("bot> {}\n", render(&message.content).replace('\n', "\n     "));
        let mut out = tokio::io::stdout();
        out.write_all(text.as_bytes())
            .await
            .map_err(|e| botmesh_core::Error::provider("console", "send", e))?;
        out.flush().await.map_err(|e| botmesh_core::Error::provider("console", "send", e))?;
        let n = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(SendReceipt::new(Some(MessageId::from(format!("out-{n}")))))
    }

    fn status(&self) -> TransportStatus {
        if self.open.load(Ordering::SeqCst) {
            TransportStatus::Open
        } else {
            TransportStatus::Closed
        }
    }
}
