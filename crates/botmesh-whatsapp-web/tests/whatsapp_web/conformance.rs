//! The provider conformance suite, on the phone network stand-in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Provider;
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_testing::{MemoryCoordinationHub, ProviderHarness, provider_conformance};
use botmesh_whatsapp_web::seam::{WaBody, WaIncoming};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// The suite's view of WhatsApp. Each provider instance gets a number of its own, so that a
/// message said to a stopped instance waits on its own number and never reaches a later
/// step's bot; chats are named by the suite and numbered here.
#[derive(Default)]
struct Harness {
    networks: Mutex<Vec<(Arc<dyn Provider>, PhoneNetwork)>>,
    chats: Mutex<HashMap<String, String>>,
}

impl Harness {
    fn phone(&self, name: &str) -> String {
        let mut chats = self.chats.lock().unwrap();
        let next = format!("3470000{:04}", chats.len());
        chats.entry(name.to_owned()).or_insert(next).clone()
    }

    fn network_of(&self, provider: &Arc<dyn Provider>) -> PhoneNetwork {
        let networks = self.networks.lock().unwrap();
        networks.iter().find(|(p, _)| Arc::ptr_eq(p, provider)).map(|(_, n)| n.clone()).unwrap()
    }
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        let network = PhoneNetwork::new();
        let provider: Arc<dyn Provider> =
            Arc::new(provider(&network, &session_dir(), &Arc::default()));
        self.networks.lock().unwrap().push((Arc::clone(&provider), network));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        let chat = jid(&self.phone(chat));
        let message = WaIncoming::new(chat.clone(), id, chat, WaBody::Text(text.to_owned()));
        self.network_of(to).user_sends(message);
        None
    }

    fn chat_id(&self, name: &str) -> String {
        jid(&self.phone(name))
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        let chat = jid(&self.phone(chat));
        let networks = self.networks.lock().unwrap();
        networks.iter().flat_map(|(_, n)| n.sent_texts(&chat)).collect()
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        // The step that throttles runs on the provider made last.
        let networks = self.networks.lock().unwrap();
        if let Some((_, network)) = networks.last() {
            network.throttle_next_send(retry_after);
        }
    }

    async fn malformed(&self, _to: &Arc<dyn Provider>) -> Option<u16> {
        // The client library parses WhatsApp's frames; nothing malformed reaches the provider.
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_web_passes_the_provider_conformance_suite() {
    let hub = MemoryCoordinationHub::new();
    let coordination = move |id: &str| -> Arc<dyn Coordination> { replica(&hub, id).1 };
    provider_conformance(&Harness::default(), coordination).await;
}
