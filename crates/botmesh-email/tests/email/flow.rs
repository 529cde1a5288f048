//! A persistent flow by e-mail, end to end: the question mailed, the answers read from the new
//! part of each reply, the bot's mails threaded under the user's, a restart halfway.

use std::sync::Arc;

use botmesh_core::traits::{Provider, Store};
use botmesh_core::{Ask, Bot, BotError, Flow, MemoryStore, Step, Trigger};
use botmesh_email::EmailProvider;
use botmesh_testing::email::DovecotServer;
use botmesh_testing::email::SmtpSink;
use serde_json::json;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

const ANA: &str = "ana@example.org";

fn order() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keywords(["order"]))
        .persistent()
        .ask(Ask::new("size", "Which size? S, M or L").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?").validate(|m| match m.body.trim().parse::<u32>() {
            Ok(n) => Ok(json!(n)),
            Err(_) => Err("A number, please.".to_owned()),
        }))
        .do_step("done", |c| async move {
            let size: String = c.get("size").unwrap_or_default();
            let qty: u32 = c.get("qty").unwrap_or(0);
            c.send(format!("Order placed: {qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

async fn start(provider: &EmailProvider, store: &Arc<dyn Store>) -> Bot {
    let bot = Bot::builder()
        .provider(provider.clone())
        .store(Arc::clone(store))
        .flow(order())
        .build()
        .unwrap();
    bot.start().await.unwrap();
    bot
}

/// The `Message-ID` of a sent mail, without angle brackets.
fn id_of(m: &botmesh_testing::email::SentMail) -> String {
    m.header("Message-ID").unwrap().trim_matches(['<', '>']).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_flow_runs_by_mail_threaded_and_survives_a_restart() {
    let server = DovecotServer::start().unwrap();
    let sink = SmtpSink::start().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let provider = provider(&server, &sink);
    let bot = start(&provider, &store).await;

    server.deliver(&mail(ANA, "q1@example.org", "Order", "order\n\n-- \nAna", &[])).unwrap();
    assert_eq!(wait_texts(&sink, ANA, 1).await, ["Which size? S, M or L"]);
    let asked = &sink.mails_to(ANA)[0];
    assert_eq!(asked.header("Subject").as_deref(), Some("Re: Order"));
    assert_eq!(asked.header("In-Reply-To").as_deref(), Some("<q1@example.org>"));
    assert_eq!(asked.header("References").as_deref(), Some("<q1@example.org>"));
    let b1 = id_of(asked);

    // The answer quotes the question below it: only the new part is the answer.
    let quoted = "M\n\nOn Fri, 4 Dec 2026, Shop <help@shop.test> wrote:\n> Which size? S, M or L";
    server
        .deliver(&mail(ANA, "q2@example.org", "Re: Order", quoted, &["q1@example.org", &b1]))
        .unwrap();
    assert_eq!(wait_texts(&sink, ANA, 2).await[1], "How many?");
    let b2 = id_of(&sink.mails_to(ANA)[1]);
    bot.stop().await.unwrap();

    // Another process on the same store continues the flow from its checkpoint, and the
    // mailbox from the stored position.
    let provider = provider_again(&server, &sink);
    let bot = start(&provider, &store).await;
    let signed = "2\n-- \nAna Pérez\nExample Corp";
    let refs = ["q1@example.org", b1.as_str(), "q2@example.org", b2.as_str()];
    server.deliver(&mail(ANA, "q3@example.org", "Re: Order", signed, &refs)).unwrap();
    assert_eq!(wait_texts(&sink, ANA, 3).await[2], "Order placed: 2 x M");
    let placed = &sink.mails_to(ANA)[2];
    assert_eq!(placed.header("Subject").as_deref(), Some("Re: Order"));
    assert_eq!(placed.header("In-Reply-To").as_deref(), Some("<q3@example.org>"));
    let chain = placed.header("References").unwrap();
    assert!(
        chain.starts_with("<q1@example.org>") && chain.ends_with("<q3@example.org>"),
        "{chain}"
    );

    // The whole mail and its whole text stay reachable.
    let id = EmailProvider::message_id(ANA, "q3@example.org");
    let whole = provider.fetch_media(&EmailProvider::whole_mail(&id)).await.unwrap();
    assert!(String::from_utf8_lossy(&whole).contains("Message-ID: <q3@example.org>"));
    let text = provider.fetch_media(&EmailProvider::full_text(&id)).await.unwrap();
    assert!(String::from_utf8_lossy(&text).contains("Ana Pérez"), "the signature is kept");
    bot.stop().await.unwrap();
    assert_eq!(sink.mails_to(ANA).len(), 3, "each question and answer mailed once");
}

fn provider_again(server: &DovecotServer, sink: &SmtpSink) -> EmailProvider {
    provider(server, sink)
}
