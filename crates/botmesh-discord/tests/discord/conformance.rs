//! The provider conformance suite, on the stand-in's gateway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::TransportStatus;
use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Provider;
use botmesh_testing::discord::{Author, DiscordServer, Fault};
use botmesh_testing::{MemoryCoordinationHub, ProviderHarness, provider_conformance};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// The suite's view of Discord: chats are DM channels the suite names, numbered here, and
/// messages keep the id they were first delivered with.
struct Harness {
    server: DiscordServer,
    chats: Mutex<HashMap<String, u64>>,
    ids: Mutex<HashMap<String, u64>>,
}

impl Harness {
    fn channel(&self, name: &str) -> u64 {
        let mut chats = self.chats.lock().unwrap();
        let next = 1000 + u64::try_from(chats.len()).unwrap();
        *chats.entry(name.to_owned()).or_insert(next)
    }
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        Arc::new(discord(&self.server))
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        // The gateway delivers to the sessions live now: wait for the instance's session (a
        // started bot connects in the background), but not for one that was stopped.
        let deadline = Instant::now() + Duration::from_secs(3);
        while to.status() != TransportStatus::Open && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let channel = self.channel(chat);
        let known = self.ids.lock().unwrap().get(id).copied();
        let author = Author::dm(channel + 1_000_000, "user");
        let given = self.server.user_writes(channel, &author, text, |m| {
            if let Some(known) = known {
                m["id"] = serde_json::json!(known.to_string());
            }
        });
        self.ids.lock().unwrap().entry(id.to_owned()).or_insert(given);
        None
    }

    fn chat_id(&self, name: &str) -> String {
        self.channel(name).to_string()
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.server.sent_texts(self.channel(chat))
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        self.server.fail_next_send(Fault::RateLimited { retry_after, header: true });
    }

    async fn malformed(&self, _to: &Arc<dyn Provider>) -> Option<u16> {
        // Gateway frames are parsed by serenity; nothing answers the platform.
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_passes_the_provider_conformance_suite() {
    let harness = Harness {
        server: DiscordServer::start().await.unwrap(),
        chats: Mutex::default(),
        ids: Mutex::default(),
    };
    let hub = MemoryCoordinationHub::new();
    provider_conformance(&harness, move |id| -> Arc<dyn Coordination> { replica(&hub, id).1 })
        .await;
    assert_eq!(harness.server.max_live_sessions(), 1, "never two sessions at once");
}
