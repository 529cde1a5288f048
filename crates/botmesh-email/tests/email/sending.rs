//! Sending through SMTP: receipts carry the `Message-ID`, idempotency keys keep it, SMTP
//! refusals are typed, files go as attachments.

use botmesh_core::traits::Provider;
use botmesh_core::{Error, MediaKind, MediaSource, Outbound, OutboundContent};
use botmesh_email::EmailProvider;
use botmesh_testing::email::SmtpSink;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn a_receipt_carries_the_message_id_and_an_idempotency_key_keeps_it() {
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s", smtp(&sink));
    let one = provider.send(&Outbound::text("ana@example.org", "hi")).await.unwrap();
    let sent = &sink.mails_to("ana@example.org")[0];
    let id = one.id.unwrap().to_string();
    assert_eq!(sent.header("Message-ID"), Some(format!("<{id}>")));
    assert!(id.ends_with("@shop.test"), "{id}");
    let keyed = Outbound::text("ana@example.org", "again").with_idempotency_key("outbox-7");
    let a = provider.send(&keyed).await.unwrap().id.unwrap();
    let b = provider.send(&keyed).await.unwrap().id.unwrap();
    assert_eq!(a, b, "a send repeated after a crash keeps its Message-ID");
    assert_ne!(a.to_string(), id);
}

#[tokio::test]
async fn smtp_refusals_are_typed_temporary_or_permanent() {
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s", smtp(&sink));
    let message = Outbound::text("bo@example.org", "x");
    let send = || provider.send(&message);
    sink.fail_next(451, "4.7.1 greylisted, try again later");
    assert!(matches!(send().await, Err(Error::RateLimited { .. })), "temporary");
    sink.fail_next(550, "5.1.1 no such user");
    assert!(matches!(send().await, Err(Error::RecipientGone { .. })), "no such mailbox");
    sink.fail_next(552, "5.3.4 message too big");
    assert!(matches!(send().await, Err(Error::TooLarge { .. })));
    sink.fail_next(554, "5.7.1 rejected");
    let refused = send().await.unwrap_err();
    assert!(!refused.is_retryable(), "a permanent refusal is not retried: {refused}");
    assert!(send().await.is_ok(), "the next send goes through");
    let nowhere = provider.send(&Outbound::text("not an address", "x")).await;
    assert!(matches!(nowhere, Err(Error::InvalidInput { .. })));
}

#[tokio::test]
async fn a_file_goes_as_an_attachment_with_its_caption_as_the_text() {
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s", smtp(&sink));
    let source = MediaSource::bytes(
        b"%PDF-1.4".to_vec(),
        Some("invoice.pdf".into()),
        Some("application/pdf".into()),
    );
    let content = OutboundContent::Media {
        kind: MediaKind::Document,
        source,
        caption: Some("Your invoice".into()),
    };
    provider.send(&Outbound::new("cy@example.org", content)).await.unwrap();
    let sent = &sink.mails_to("cy@example.org")[0];
    assert_eq!(sent.text(), "Your invoice");
    assert!(sent.raw.contains("filename=\"invoice.pdf\""), "{}", sent.raw);
}
