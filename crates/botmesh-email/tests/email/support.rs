//! What the tests share: providers on the test servers, mails, replicas, waits.

use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::coordination::Coordination;
use botmesh_email::{EmailProvider, ImapConfig, Security, SmtpConfig};
use botmesh_testing::email::{DovecotServer, SmtpSink};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use tokio::time::Instant;

pub(crate) const BOT: &str = "help@shop.test";
/// The replicas' lease: long enough that the takeover it bounds (`lease + lease / 3`) is not
/// lost in the noise of a loaded two-core machine running the workspace's tests.
pub(crate) const LEASE: Duration = Duration::from_secs(2);
pub(crate) const WITHIN: Duration = Duration::from_secs(20);

/// The SMTP side, pointed at the sink; a temporary refusal is waited out for 100 ms.
pub(crate) fn smtp(sink: &SmtpSink) -> SmtpConfig {
    SmtpConfig::new(sink.host(), BOT)
        .port(sink.port())
        .security(Security::Plain)
        .temporary_retry(Duration::from_millis(100))
        .timeout(Duration::from_secs(10))
}

/// The IMAP side, pointed at the private Dovecot, with short pauses for tests.
pub(crate) fn imap(server: &DovecotServer) -> ImapConfig {
    ImapConfig::new(server.host(), server.user(), server.password())
        .port(server.port())
        .security(Security::Plain)
        .poll_interval(Duration::from_millis(200))
        .max_backoff(Duration::from_millis(500))
        .down_after(Duration::from_secs(2))
}

pub(crate) fn provider(server: &DovecotServer, sink: &SmtpSink) -> EmailProvider {
    EmailProvider::imap(imap(server), smtp(sink))
}

/// A mail from `from` with `Message-ID` `<id>`; `refs` are the ids it answers, oldest first.
pub(crate) fn mail(from: &str, id: &str, subject: &str, text: &str, refs: &[&str]) -> Vec<u8> {
    let mut m = format!(
        "From: User <{from}>\r\nTo: {BOT}\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\n\
         Date: Fri, 4 Dec 2026 10:00:00 +0000\r\n"
    );
    if let Some(last) = refs.last() {
        m.push_str(&format!("In-Reply-To: <{last}>\r\n"));
        let all: Vec<String> = refs.iter().map(|r| format!("<{r}>")).collect();
        m.push_str(&format!("References: {}\r\n", all.join(" ")));
    }
    m.push_str("Content-Type: text/plain; charset=utf-8\r\n\r\n");
    m.push_str(&text.replace('\n', "\r\n"));
    m.push_str("\r\n");
    m.into_bytes()
}

/// Waits until `sink` received `n` mails for `to`, and returns their texts.
pub(crate) async fn wait_texts(sink: &SmtpSink, to: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let texts = sink.texts_to(to);
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "{to} got {texts:?}, wanted {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `done` holds.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn replica(
    hub: &MemoryCoordinationHub,
    id: &str,
) -> (Arc<MemoryCoordinator>, Arc<dyn Coordination>) {
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(LEASE));
    // A crashed replica's stop gives up on its queues after `settle`, not the default minute.
    let coordination = CoordinationConfig::new(Arc::clone(&coordinator))
        .settle(Duration::from_secs(2))
        .turn_wait(Duration::from_secs(10))
        .build();
    (coordinator, coordination)
}
