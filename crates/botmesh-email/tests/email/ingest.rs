//! The ingest endpoint: secret and signature checks, the body limit, malformed mail.

use std::sync::{Arc, Mutex};

use botmesh_core::{Bot, BotError, Event};
use botmesh_email::{EmailProvider, SECRET_HEADER, SIGNATURE_HEADER, signature};
use botmesh_testing::email::SmtpSink;
use botmesh_traits::webhook::Limits;
use botmesh_traits::webhook::axum::Router;
use botmesh_traits::webhook::axum::body::Body;
use botmesh_traits::webhook::axum::http::Request;
use tower::ServiceExt;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

async fn post(router: &Router, headers: &[(&str, &str)], body: Vec<u8>) -> u16 {
    let mut request = Request::post("/email");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request.body(Body::from(body)).unwrap();
    router.clone().oneshot(request).await.unwrap().status().as_u16()
}

async fn echo(provider: &EmailProvider) -> (Bot, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&errors);
    let bot = Bot::builder()
        .provider(provider.clone())
        .on(move |e| {
            if let Event::Error { .. } = e {
                seen.lock().unwrap().push(format!("{e:?}"));
            }
        })
        .on_message(|ctx| async move {
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    (bot, errors)
}

#[tokio::test]
async fn a_wrong_or_missing_secret_is_refused_and_the_right_one_is_taken() {
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s3cret", smtp(&sink));
    let router = provider.router();
    let (bot, _) = echo(&provider).await;
    let m = || mail("ana@example.org", "i1@x", "Hi", "hello", &[]);
    assert_eq!(post(&router, &[], m()).await, 401, "no secret");
    assert_eq!(post(&router, &[(SECRET_HEADER, "s3creT")], m()).await, 401, "a wrong secret");
    assert_eq!(post(&router, &[(SECRET_HEADER, "s3cret")], m()).await, 200);
    assert_eq!(wait_texts(&sink, "ana@example.org", 1).await, ["echo hello"]);
    bot.stop().await.unwrap();
    assert_eq!(post(&router, &[(SECRET_HEADER, "s3cret")], m()).await, 503, "stopped");
}

#[tokio::test]
async fn a_body_must_carry_its_hmac_signature() {
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("unused", smtp(&sink)).with_hmac("k3y");
    let router = provider.router();
    let (bot, _) = echo(&provider).await;
    let body = mail("bo@example.org", "h1@x", "Hi", "signed", &[]);
    let good = signature(b"k3y", &body);
    let forged = signature(b"other", &body);
    assert_eq!(post(&router, &[(SIGNATURE_HEADER, &forged)], body.clone()).await, 401);
    assert_eq!(post(&router, &[(SECRET_HEADER, "unused")], body.clone()).await, 401);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b"more");
    assert_eq!(post(&router, &[(SIGNATURE_HEADER, &good)], tampered).await, 401);
    assert_eq!(post(&router, &[(SIGNATURE_HEADER, &good)], body).await, 200);
    assert_eq!(wait_texts(&sink, "bo@example.org", 1).await, ["echo signed"]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_a_malformed_mail_400_and_reported() {
    let sink = SmtpSink::start().await.unwrap();
    let provider =
        EmailProvider::ingest("s", smtp(&sink)).with_limits(Limits::new().max_body_bytes(2048));
    let router = provider.router();
    let (bot, errors) = echo(&provider).await;
    let big = mail("cy@example.org", "b1@x", "Hi", &"x".repeat(4096), &[]);
    assert_eq!(post(&router, &[(SECRET_HEADER, "s")], big).await, 413);
    let broken = b"Subject: no sender\r\n\r\nbody\r\n".to_vec();
    assert_eq!(post(&router, &[(SECRET_HEADER, "s")], broken).await, 400);
    until("the malformed mail is reported", || {
        errors.lock().unwrap().iter().any(|e| e.contains("malformed"))
    })
    .await;
    let small = mail("cy@example.org", "b2@x", "Hi", "small", &[]);
    assert_eq!(post(&router, &[(SECRET_HEADER, "s")], small).await, 200);
    assert_eq!(wait_texts(&sink, "cy@example.org", 1).await, ["echo small"]);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn threads_make_chats_of_their_own_and_attachments_stay_reachable() {
    use botmesh_core::Media;
    use botmesh_core::traits::Provider;
    use botmesh_email::Threading;
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s", smtp(&sink)).with_threading(Threading::Thread);
    let router = provider.router();
    let chats = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&chats);
    let bot = Bot::builder()
        .provider(provider.clone())
        .on_message(move |ctx| {
            let seen = Arc::clone(&seen);
            async move {
                let m = &ctx.message().inbound;
                let kind = m.content.type_name();
                seen.lock().unwrap().push((m.chat.to_string(), kind));
                ctx.reply(format!("echo {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let secret = [(SECRET_HEADER, "s")];
    let first = mail("dee@example.org", "t1@x", "Shoes", "about shoes", &[]);
    assert_eq!(post(&router, &secret, first).await, 200);
    let other = "From: dee@example.org\r\nSubject: Hats\r\nMessage-ID: <t2@x>\r\n\
        MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n\
        Content-Type: text/plain\r\n\r\nabout hats, photo attached\r\n--b\r\n\
        Content-Type: image/png; name=\"hat.png\"\r\nContent-Disposition: attachment; \
        filename=\"hat.png\"\r\nContent-Transfer-Encoding: base64\r\n\r\naGF0\r\n--b--\r\n";
    assert_eq!(post(&router, &secret, other.as_bytes().to_vec()).await, 200);
    let answer = mail("dee@example.org", "t3@x", "Re: Shoes", "size 40", &["t1@x"]);
    assert_eq!(post(&router, &secret, answer).await, 200);
    let texts = wait_texts(&sink, "dee@example.org", 3).await;
    assert!(texts.contains(&"echo about hats, photo attached".to_owned()), "{texts:?}");
    bot.wait_idle().await;
    let chats = chats.lock().unwrap().clone();
    let shoes = chats.iter().filter(|(c, _)| c == "dee@example.org#t1@x").count();
    let hats: Vec<_> = chats.iter().filter(|(c, _)| c == "dee@example.org#t2@x").collect();
    assert_eq!(shoes, 2, "the answer joins its thread's chat: {chats:?}");
    assert_eq!(hats, [&("dee@example.org#t2@x".to_owned(), "media")]);
    // The reply to the answer is threaded under it.
    let to_shoes = sink
        .mails_to("dee@example.org")
        .into_iter()
        .find(|m| m.header("In-Reply-To").as_deref() == Some("<t3@x>"))
        .unwrap();
    assert_eq!(to_shoes.header("References").as_deref(), Some("<t1@x> <t3@x>"));
    assert_eq!(to_shoes.header("Subject").as_deref(), Some("Re: Shoes"));
    let hat = EmailProvider::message_id("dee@example.org", "<t2@x>");
    let photo = Media::new(format!("email:{hat}/attachment/0"));
    assert_eq!(&provider.fetch_media(&photo).await.unwrap()[..], b"hat");
    let whole = provider.fetch_media(&EmailProvider::whole_mail(&hat)).await;
    assert!(String::from_utf8_lossy(&whole.unwrap()).contains("Subject: Hats"));
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn two_senders_with_the_same_message_id_are_both_handled_and_kept_apart() {
    use botmesh_core::traits::Provider;
    let sink = SmtpSink::start().await.unwrap();
    let provider = EmailProvider::ingest("s", smtp(&sink));
    let router = provider.router();
    let (bot, _) = echo(&provider).await;
    let secret = [(SECRET_HEADER, "s")];
    let ana = mail("ana@example.org", "same@x", "Shoes", "about shoes", &[]);
    assert_eq!(post(&router, &secret, ana).await, 200);
    assert_eq!(wait_texts(&sink, "ana@example.org", 1).await, ["echo about shoes"]);
    // A stranger reuses Ana's Message-ID: not a duplicate, and Ana's kept mail stays hers.
    let eve = mail("eve@example.org", "same@x", "Hats", "about hats", &[]);
    assert_eq!(post(&router, &secret, eve).await, 200);
    assert_eq!(wait_texts(&sink, "eve@example.org", 1).await, ["echo about hats"]);
    let to_eve = &sink.mails_to("eve@example.org")[0];
    assert_eq!(to_eve.header("Subject").as_deref(), Some("Re: Hats"));
    // Ana answers the bot: her reply is threaded under her own first mail.
    let first_reply = sink.mails_to("ana@example.org")[0].header("Message-ID").unwrap();
    let bot_id = first_reply.trim_matches(['<', '>']).to_owned();
    let again = mail("ana@example.org", "a2@x", "Re: Shoes", "size 40", &["same@x", &bot_id]);
    assert_eq!(post(&router, &secret, again).await, 200);
    wait_texts(&sink, "ana@example.org", 2).await;
    let second = &sink.mails_to("ana@example.org")[1];
    assert_eq!(second.header("Subject").as_deref(), Some("Re: Shoes"));
    let whole = EmailProvider::whole_mail(&EmailProvider::message_id("ana@example.org", "same@x"));
    let whole = String::from_utf8(provider.fetch_media(&whole).await.unwrap().to_vec()).unwrap();
    assert!(whole.contains("about shoes") && !whole.contains("about hats"), "{whole}");
    bot.stop().await.unwrap();
}
