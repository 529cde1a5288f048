//! The provider conformance suite in both modes: IMAP against the private Dovecot, ingest
//! through the router; both send through the SMTP sink.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::coordination::Coordination;
use botmesh_core::traits::Provider;
use botmesh_email::{Backlog, EmailProvider, SECRET_HEADER};
use botmesh_testing::email::{DovecotServer, SmtpSink};
use botmesh_testing::{MemoryCoordinationHub, ProviderHarness, provider_conformance};
use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tower::ServiceExt;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

struct Harness {
    server: DovecotServer,
    sink: SmtpSink,
    ingest: bool,
    /// Each ingest instance's router.
    routers: Mutex<Vec<(Arc<dyn Provider>, Router)>>,
}

impl Harness {
    async fn new(ingest: bool) -> Self {
        Self {
            server: DovecotServer::start().unwrap(),
            sink: SmtpSink::start().await.unwrap(),
            ingest,
            routers: Mutex::default(),
        }
    }

    async fn post(&self, to: &Arc<dyn Provider>, body: Vec<u8>) -> u16 {
        let router = {
            let routers = self.routers.lock().unwrap();
            routers.iter().find(|(p, _)| Arc::ptr_eq(p, to)).map(|(_, r)| r.clone()).unwrap()
        };
        let request =
            Request::post("/email").header(SECRET_HEADER, "s").body(Body::from(body)).unwrap();
        router.oneshot(request).await.unwrap().status().as_u16()
    }
}

impl ProviderHarness for Harness {
    async fn provider(&self) -> Arc<dyn Provider> {
        if !self.ingest {
            // Each instance starts with the mail that arrives from then on, as the suite's
            // bots expect; mail left over from an earlier check stays where it is.
            let imap = imap(&self.server).backlog(Backlog::Skip);
            return Arc::new(EmailProvider::imap(imap, smtp(&self.sink)));
        }
        let provider = EmailProvider::ingest("s", smtp(&self.sink));
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
        let raw = mail(&self.chat_id(chat), &format!("{id}@suite.test"), "Suite", text, &[]);
        if !self.ingest {
            self.server.deliver(&raw).unwrap();
            return None;
        }
        Some(self.post(to, raw).await)
    }

    fn chat_id(&self, name: &str) -> String {
        format!("{name}@example.org")
    }

    async fn received(&self, chat: &str) -> Vec<String> {
        self.sink.texts_to(&self.chat_id(chat))
    }

    async fn throttle_next_send(&self, _retry_after: Duration) {
        // SMTP says "later" without saying when: the provider waits its configured
        // `temporary_retry` (100 ms in these tests).
        self.sink.fail_next(451, "4.7.1 try again later");
    }

    async fn malformed(&self, to: &Arc<dyn Provider>) -> Option<u16> {
        let broken = b"Subject: no sender\r\n\r\nnobody to answer\r\n".to_vec();
        if !self.ingest {
            // Delivered, reported, never handed to the bot; IMAP has no answer to give.
            self.server.deliver(&broken).unwrap();
            return None;
        }
        Some(self.post(to, broken).await)
    }
}

fn memory_replicas() -> impl Fn(&str) -> Arc<dyn Coordination> {
    let hub = MemoryCoordinationHub::new();
    move |id| replica(&hub, id).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_passes_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(false).await, memory_replicas()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_passes_the_provider_conformance_suite() {
    provider_conformance(&Harness::new(true).await, memory_replicas()).await;
}
