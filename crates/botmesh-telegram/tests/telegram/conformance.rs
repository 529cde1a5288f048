//! The provider conformance suite in both modes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Provider;
use botmesh_telegram::{SECRET_HEADER, TelegramProvider};
use botmesh_testing::telegram::{Fault, TelegramServer};
use botmesh_testing::{MemoryCoordinationHub, ProviderHarness, provider_conformance};
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tower::ServiceExt;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

// --- The conformance suite -------------------------------------------------------------------

/// The suite's view of Telegram: chats are named by the suite, numbered here.
struct Harness {
    server: TelegramServer,
    webhook: bool,
    chats: Mutex<HashMap<String, i64>>,
    /// The update each suite message id was first delivered as, to deliver it again.
    updates: Mutex<HashMap<String, serde_json::Value>>,
    /// Each webhook instance's router.
    routers: Mutex<Vec<(Arc<dyn Provider>, botmesh_traits::webhook::axum::Router)>>,
}

impl Harness {
    async fn new(webhook: bool) -> Self {
        Self {
            server: TelegramServer::start().await.unwrap(),
            webhook,
            chats: Mutex::default(),
            updates: Mutex::default(),
            routers: Mutex::default(),
        }
    }

    fn chat(&self, name: &str) -> i64 {
        let mut chats = self.chats.lock().unwrap();
        let next = i64::try_from(chats.len()).unwrap() + 1000;
        *chats.entry(name.to_owned()).or_insert(next)
    }
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        if !self.webhook {
            return Arc::new(polling(&self.server));
        }
        let url = "https://bot.example/telegram".parse().unwrap();
        let provider = TelegramProvider::webhook(TOKEN, url, "s")
            .with_api_url(self.server.api_url().parse().unwrap());
        let router = provider.router();
        let provider: Arc<dyn Provider> = Arc::new(provider);
        self.routers.lock().unwrap().push((Arc::clone(&provider), router));
        provider
    }

    async fn user_says(
        &self,
        to: &Arc<dyn Provider>,
        chat: &str,
        id: &str,
        text: &str,
    ) -> Option<u16> {
        let chat = self.chat(chat);
        let known = self.updates.lock().unwrap().get(id).cloned();
        let update = known.unwrap_or_else(|| {
            let message_id = self.server.next_message_id(chat);
            serde_json::json!({"message": {
                "message_id": message_id, "date": 0, "text": text,
                "chat": {"id": chat, "type": "private", "first_name": "u"},
                "from": {"id": chat, "is_bot": false, "first_name": "u"},
            }})
        });
        self.updates.lock().unwrap().insert(id.to_owned(), update.clone());
        if !self.webhook {
            self.server.user_sends(update);
            return None;
        }
        let mut body = update;
        body["update_id"] =
            serde_json::json!(i64::try_from(self.updates.lock().unwrap().len()).unwrap());
        let router = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, r)| r.clone()).unwrap()
        };
        let request = Request::post("/telegram")
            .header("content-type", "application/json")
            .header(SECRET_HEADER, "s")
            .body(Body::from(body.to_string()))
            .unwrap();
        Some(router.oneshot(request).await.unwrap().status().as_u16())
    }

    fn chat_id(&self, name: &str) -> String {
        self.chat(name).to_string()
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.server.sent_texts(self.chat(chat))
    }

    async fn throttle_next_send(&self, retry_after: Duration) {
        self.server.fail_next("sendMessage", Fault::TooManyRequests { retry_after });
    }

    async fn malformed(&self, to: &Arc<dyn Provider>) -> Option<u16> {
        if !self.webhook {
            return None;
        }
        let router = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, r)| r.clone()).unwrap()
        };
        let request = Request::post("/telegram")
            .header(SECRET_HEADER, "s")
            .body(Body::from("{\"update_id\": [}"))
            .unwrap();
        Some(router.oneshot(request).await.unwrap().status().as_u16())
    }
}

fn memory_replicas() -> impl Fn(&str) -> Arc<dyn Coordination> {
    let hub = MemoryCoordinationHub::new();
    move |id| replica(&hub, id).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_passes_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(false).await, memory_replicas()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_pass_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(true).await, memory_replicas()).await;
}
