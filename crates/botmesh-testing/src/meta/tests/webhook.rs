//! Webhook deliveries: signed bodies in each channel's shape, retries to the next
//! subscriber with backoff, per-user order, batches, the handshake and raw posts.

use std::time::Duration;

use serde_json::json;

use super::super::{Channel, GraphServer, Inbound, MessageStatus, SIGNATURE_HEADER};
use super::{Receiver, SOON, dead_url, expected_signature, start};

#[tokio::test]
async fn deliveries_are_signed_with_the_app_secret_over_the_raw_body() {
    let server = GraphServer::builder().app_secret("sekret-42").start().await.unwrap();
    let receiver = Receiver::start(&server).await;
    server.subscribe(&receiver.url);
    let id =
        server.deliver(Inbound::text(Channel::WhatsApp, "34600", "héllo ✓").profile_name("Ana"));
    assert!(server.wait_for_all_delivered(SOON).await);

    let hits = receiver.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.status, 200, "the receiver found the signature wrong");
    let signature = hit.signature.clone().unwrap();
    assert_eq!(signature, expected_signature("sekret-42", &hit.raw));
    assert_ne!(signature, expected_signature("botmesh-app-secret", &hit.raw));
    assert_eq!(signature.len(), "sha256=".len() + 64);
    assert_eq!(signature, server.sign(&hit.raw));
    assert_eq!(hit.content_type.as_deref(), Some("application/json"));
    assert_eq!(SIGNATURE_HEADER, "X-Hub-Signature-256");

    let body = &hit.body;
    assert_eq!(body["object"], "whatsapp_business_account");
    assert_eq!(body["entry"][0]["id"], server.waba_id());
    let change = &body["entry"][0]["changes"][0];
    assert_eq!(change["field"], "messages");
    let value = &change["value"];
    assert_eq!(value["messaging_product"], "whatsapp");
    assert_eq!(
        value["metadata"],
        json!({"display_phone_number": server.display_phone_number(), "phone_number_id": server.phone_number_id()})
    );
    assert_eq!(value["contacts"], json!([{"profile": {"name": "Ana"}, "wa_id": "34600"}]));
    let m = &value["messages"][0];
    assert_eq!((&m["from"], &m["id"], &m["type"]), (&json!("34600"), &json!(id), &json!("text")));
    assert_eq!(m["text"], json!({"body": "héllo ✓"}));
    assert!(m["timestamp"].as_str().unwrap().parse::<u64>().unwrap() > 1_700_000_000);

    let deliveries = server.deliveries();
    assert_eq!(deliveries.len(), 1);
    let d = &deliveries[0];
    assert!(d.delivered());
    assert_eq!((d.url.as_str(), d.status, d.attempt), (receiver.url.as_str(), Some(200), 1));
    assert_eq!(d.message_ids, [id]);
    assert_eq!(d.body.as_bytes(), hit.raw);
}

#[tokio::test]
async fn a_refused_body_is_retried_at_the_next_subscriber() {
    let server = start().await;
    let first = Receiver::start(&server).await;
    let second = Receiver::start(&server).await;
    let dead = dead_url().await;
    first.answer(&[503]);
    server.subscribe(&first.url);
    server.subscribe(&dead);
    server.subscribe(&second.url);
    let id = server.messenger_text("psid-1", "hi");
    assert!(server.wait_for_all_delivered(SOON).await);

    let summary: Vec<_> = server
        .deliveries()
        .into_iter()
        .map(|d| (d.url, d.status, d.attempt, d.message_ids))
        .collect();
    assert_eq!(
        summary,
        [
            (first.url.clone(), Some(503), 1, vec![id.clone()]),
            (dead.clone(), None, 2, vec![id.clone()]),
            (second.url.clone(), Some(200), 3, vec![id.clone()]),
        ]
    );
    assert!(server.deliveries()[1].error.as_deref().unwrap().contains("connect"));
    // The same signed bytes each time.
    assert_eq!(first.hits()[0].raw, second.hits()[0].raw);

    // The next body starts at the next subscriber in turn (the dead one), then moves on.
    let next = server.messenger_text("psid-2", "next");
    assert!(server.wait_for_all_delivered(SOON).await);
    let summary: Vec<_> = server
        .deliveries()
        .into_iter()
        .filter(|d| d.message_ids == [next.clone()])
        .map(|d| (d.url, d.status, d.attempt))
        .collect();
    assert_eq!(summary, [(dead.clone(), None, 1), (second.url.clone(), Some(200), 2)]);
}

#[tokio::test]
async fn retries_back_off_doubling_up_to_the_maximum() {
    let server = GraphServer::builder()
        .webhook_retry(Duration::from_millis(50), Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let receiver = Receiver::start(&server).await;
    receiver.answer(&[500, 503, 502]);
    server.subscribe(&receiver.url);
    server.instagram_text("igsid", "hi");
    assert!(server.wait_for_all_delivered(SOON).await);

    let hits = receiver.hits();
    let statuses: Vec<_> = hits.iter().map(|h| h.status).collect();
    assert_eq!(statuses, [500, 503, 502, 200]);
    let attempts: Vec<_> = server.deliveries().iter().map(|d| d.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    let gaps: Vec<Duration> = hits.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(50), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(100), "doubled: {gaps:?}");
    assert!(gaps[2] >= Duration::from_millis(100), "{gaps:?}");
    assert!(gaps[2] < Duration::from_millis(190), "capped at the maximum: {gaps:?}");
}

#[tokio::test]
async fn a_users_next_body_waits_for_the_previous_while_others_go() {
    let server = GraphServer::builder()
        .webhook_retry(Duration::from_millis(300), Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let receiver = Receiver::start(&server).await;
    server.subscribe(&receiver.url);
    let a1 = Inbound::text(Channel::WhatsApp, "111", "a1");
    receiver.refuse_once(a1.id());
    let a1 = server.deliver(a1);
    let a2 = server.whatsapp_text("111", "a2");
    let b1 = server.whatsapp_text("222", "b1");
    let a_receipt = server.deliver(Inbound::status("111", "wamid.OUT", MessageStatus::Delivered));
    assert!(server.wait_for_all_delivered(SOON).await);

    let hits = receiver.hits();
    let order: Vec<(&str, u16)> = hits
        .iter()
        .map(|h| {
            let which = [&a1, &a2, &b1, &a_receipt].into_iter().find(|id| h.has(id)).unwrap();
            (which.as_str(), h.status)
        })
        .collect();
    let position = |id: &str, status| order.iter().position(|o| *o == (id, status)).unwrap();
    assert_eq!(order.len(), 5, "{order:?}");
    // The user's own bodies in order, each after the previous one was taken.
    assert!(position(&a1, 503) < position(&a1, 200), "{order:?}");
    assert!(position(&a1, 200) < position(&a2, 200), "{order:?}");
    assert!(position(&a2, 200) < position(&a_receipt, 200), "{order:?}");
    // The other user did not wait for the stalled one.
    assert!(position(&b1, 200) < position(&a1, 200), "{order:?}");
    let b_at = hits.iter().find(|h| h.has(&b1)).unwrap().at;
    let a_retry_at = hits.iter().filter(|h| h.has(&a1)).nth(1).unwrap().at;
    assert!(a_retry_at - b_at > Duration::from_millis(100), "{order:?}");
}

#[tokio::test]
async fn a_batch_is_one_body_acknowledged_as_a_whole() {
    let server = start().await;
    let receiver = Receiver::start(&server).await;
    receiver.answer(&[500]);
    server.subscribe(&receiver.url);
    let items = vec![
        Inbound::text(Channel::WhatsApp, "111", "one"),
        Inbound::text(Channel::WhatsApp, "222", "two"),
        Inbound::text(Channel::WhatsApp, "111", "three"),
        Inbound::status(
            "333",
            "wamid.SENT",
            MessageStatus::Failed { code: 131_026, title: "Message Undeliverable".to_owned() },
        ),
    ];
    let ids = server.deliver_batch(items);
    assert_eq!(ids.len(), 4);
    assert!(server.wait_for_all_delivered(SOON).await);

    let hits = receiver.hits();
    assert_eq!(hits.len(), 2, "refused once, then taken whole");
    assert_eq!(hits[0].raw, hits[1].raw);
    let changes = hits[1].body["entry"][0]["changes"].as_array().unwrap().clone();
    assert_eq!(changes.len(), 4);
    let got: Vec<_> =
        changes[..3].iter().map(|c| c["value"]["messages"][0]["text"]["body"].clone()).collect();
    assert_eq!(got, [json!("one"), json!("two"), json!("three")]);
    let status = &changes[3]["value"]["statuses"][0];
    assert_eq!(
        (&status["id"], &status["status"], &status["recipient_id"]),
        (&json!("wamid.SENT"), &json!("failed"), &json!("333"))
    );
    assert_eq!(status["errors"][0]["code"], 131_026);
    let deliveries = server.deliveries();
    assert_eq!(deliveries.len(), 2);
    assert!(
        deliveries
            .iter()
            .all(|d| d.message_ids == ids && d.delivery_id == deliveries[0].delivery_id)
    );

    // Items of several channels make one body per channel.
    let ids = server.deliver_batch([
        Inbound::text(Channel::Messenger, "p1", "fb one"),
        Inbound::text(Channel::Instagram, "i1", "ig"),
        Inbound::text(Channel::Messenger, "p2", "fb two"),
    ]);
    assert!(server.wait_for_all_delivered(SOON).await);
    let hits = receiver.hits();
    assert_eq!(hits.len(), 4);
    let page = hits.iter().find(|h| h.body["object"] == "page").unwrap();
    let entries = page.body["entry"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["messaging"][0]["message"]["mid"], json!(ids[2]));
    assert!(hits.iter().any(|h| h.body["object"] == "instagram" && h.has(&ids[1])));
}

#[tokio::test]
async fn messenger_and_instagram_bodies_carry_each_kind_of_event() {
    let server = start().await;
    let receiver = Receiver::start(&server).await;
    server.subscribe(&receiver.url);
    let page = server.page_id().to_owned();
    let text = server.deliver(Inbound::reply(Channel::Messenger, "p1", "m_bot", "yes"));
    let press = server.deliver(Inbound::button(Channel::Messenger, "p1", "BUY", "Buy"));
    let quick = server.deliver(Inbound::quick_reply(Channel::Messenger, "p1", "RED", "Red"));
    server.deliver(Inbound::reaction(Channel::Messenger, "p1", "m_bot", "😀"));
    server.deliver(Inbound::delivered(Channel::Messenger, "p1", &["m_bot"]));
    server.deliver(Inbound::read(Channel::Messenger, "p1", 1_700_000_000_000));
    let ig = server.instagram_text("i1", "from ig");
    assert!(server.wait_for_all_delivered(SOON).await);

    // The Instagram user's body may go at any time; the page user's go in order.
    let (ig_hits, hits): (Vec<_>, Vec<_>) =
        receiver.hits().into_iter().partition(|h| h.body["object"] == "instagram");
    assert_eq!((ig_hits.len(), hits.len()), (1, 6));
    let items: Vec<_> = hits.iter().map(|h| h.body["entry"][0]["messaging"][0].clone()).collect();
    for (hit, item) in hits.iter().zip(&items) {
        assert_eq!(hit.body["object"], "page");
        assert_eq!(hit.body["entry"][0]["id"], json!(page));
        assert!(hit.body["entry"][0]["time"].is_u64());
        assert_eq!((&item["sender"]["id"], &item["recipient"]["id"]), (&json!("p1"), &json!(page)));
        assert!(item["timestamp"].is_u64());
    }
    assert_eq!(
        items[0]["message"],
        json!({"mid": text, "text": "yes", "reply_to": {"mid": "m_bot"}})
    );
    assert_eq!(items[1]["postback"], json!({"mid": press, "title": "Buy", "payload": "BUY"}));
    assert_eq!(
        items[2]["message"],
        json!({"mid": quick, "text": "Red", "quick_reply": {"payload": "RED"}})
    );
    assert_eq!(items[3]["reaction"]["mid"], "m_bot");
    assert_eq!(
        (&items[3]["reaction"]["action"], &items[3]["reaction"]["emoji"]),
        (&json!("react"), &json!("😀"))
    );
    assert_eq!(items[4]["delivery"]["mids"], json!(["m_bot"]));
    assert_eq!(items[5]["read"], json!({"watermark": 1_700_000_000_000_u64}));
    let ig_body = &ig_hits[0].body;
    assert_eq!(ig_body["entry"][0]["id"], server.instagram_id());
    assert_eq!(
        ig_body["entry"][0]["messaging"][0]["message"],
        json!({"mid": ig, "text": "from ig"})
    );
}

#[tokio::test]
async fn bodies_wait_for_a_subscriber() {
    let server = start().await;
    server.whatsapp_text("111", "early");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(server.pending_deliveries(), 1);
    assert!(server.deliveries().is_empty());
    let receiver = Receiver::start(&server).await;
    server.subscribe(&receiver.url);
    assert!(server.wait_for_all_delivered(SOON).await);
    assert_eq!(receiver.hits().len(), 1);
    assert!(server.unsubscribe(&receiver.url));
    assert!(!server.unsubscribe(&receiver.url));
    assert!(server.subscribers().is_empty());
}

#[tokio::test]
async fn the_handshake_echoes_the_challenge() {
    let server = GraphServer::builder().verify_token("let-me-in").start().await.unwrap();
    let receiver = Receiver::start(&server).await;
    assert!(server.verify(&receiver.url).await);
    assert!(!server.verify_with(&receiver.url, "wrong").await);
    assert!(!server.verify(&dead_url().await).await);
    assert!(!server.verify("not a url").await);
    let challenges = receiver.seen.lock().unwrap().challenges.clone();
    assert_eq!(challenges.len(), 2);
    assert_ne!(challenges[0], challenges[1]);
    assert!(challenges[0].len() == 10 && challenges[0].bytes().all(|b| b.is_ascii_digit()));

    // A receiver that answers 200 without echoing the challenge fails the handshake.
    let app = axum::Router::new().route("/webhook", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    assert!(!server.verify(&url).await);
}

#[tokio::test]
async fn raw_posts_carry_any_bytes_and_signature() {
    let server = start().await;
    let receiver = Receiver::start(&server).await;
    let body = br#"{"object":"page","entry":[]}"#;
    assert_eq!(
        server.post_raw(&receiver.url, body.to_vec(), Some(&server.sign(body))).await,
        Some(200)
    );
    assert_eq!(server.post_raw(&receiver.url, body.to_vec(), Some("sha256=00")).await, Some(403));
    assert_eq!(server.post_raw(&receiver.url, body.to_vec(), None).await, Some(403));
    assert_eq!(server.post_raw(&dead_url().await, body.to_vec(), None).await, None);
    let hits = receiver.hits();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[1].signature.as_deref(), Some("sha256=00"));
    assert!(hits[2].signature.is_none());
    assert!(server.deliveries().is_empty(), "raw posts are not recorded");
}
