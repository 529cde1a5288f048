//! WhatsApp sends: Graph's answer, the record, every type, the 24-hour window, malformed
//! sends and read receipts.

use serde_json::{Value, json};

use super::super::{Channel, SentMedia, SentReaction};
use super::{TOKEN, call, post, start};

const USER: &str = "34600111222";

fn messages(server: &super::GraphServer) -> String {
    format!("{}/messages", server.phone_number_id())
}

#[tokio::test]
async fn a_text_is_answered_in_graphs_shape_and_recorded() {
    let server = start().await;
    let hello = server.whatsapp_text(USER, "hello");
    let (status, answer) = post(
        &server,
        &messages(&server),
        &json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": "+34 600 111 222",
            "type": "text",
            "text": { "body": "HELLO", "preview_url": false },
            "context": { "message_id": hello },
        }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["messages"][0]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("wamid."), "{id}");
    assert_eq!(
        answer,
        json!({
            "messaging_product": "whatsapp",
            "contacts": [{ "input": "+34 600 111 222", "wa_id": USER }],
            "messages": [{ "id": id }],
        })
    );
    let sent = server.sent(Channel::WhatsApp, USER);
    assert_eq!(sent.len(), 1);
    let m = &sent[0];
    assert_eq!((m.kind.as_str(), m.text.as_deref()), ("text", Some("HELLO")));
    assert_eq!(m.message_id.as_deref(), Some(id.as_str()));
    assert_eq!(m.reply_to.as_deref(), Some(hello.as_str()));
    assert_eq!(m.body["text"]["preview_url"], false);

    // Without the version segment, and a second send gets a new id.
    let url = format!("{}/{}", server.base_url(), messages(&server));
    let body = json!({"messaging_product": "whatsapp", "to": USER, "text": {"body": "again"}});
    let (status, answer) =
        call(crate::http::client().post(url).bearer_auth(TOKEN).json(&body)).await;
    assert_eq!(status, 200, "{answer}");
    assert_ne!(answer["messages"][0]["id"], json!(id));
    assert_eq!(server.sent_texts(Channel::WhatsApp, USER), ["HELLO", "again"]);
}

#[tokio::test]
async fn every_type_is_accepted_and_recorded() {
    let server = start().await;
    server.whatsapp_text(USER, "hi");
    let media = server.register_media(b"%PDF".to_vec(), "application/pdf");
    let wamid = "wamid.USER";
    let sends: Vec<(&str, Value)> = vec![
        ("image", json!({"link": "https://example.com/a.png", "caption": "a cat"})),
        ("document", json!({"id": media, "filename": "a.pdf"})),
        ("audio", json!({"link": "https://example.com/a.ogg"})),
        ("video", json!({"link": "https://example.com/a.mp4"})),
        ("sticker", json!({"link": "https://example.com/a.webp"})),
        ("location", json!({"latitude": 40.4, "longitude": -3.7, "name": "Madrid"})),
        ("contacts", json!([{"name": {"formatted_name": "Ana"}}])),
        (
            "interactive",
            json!({"type": "button", "body": {"text": "Pick"},
                   "action": {"buttons": [{"type": "reply", "reply": {"id": "y", "title": "Yes"}}]}}),
        ),
        ("reaction", json!({"message_id": wamid, "emoji": "👍"})),
        ("template", json!({"name": "hello_world", "language": {"code": "en_US"}})),
    ];
    for (kind, content) in &sends {
        let mut body = json!({"messaging_product": "whatsapp", "to": USER, "type": kind});
        body[*kind] = content.clone();
        let (status, answer) = post(&server, &messages(&server), &body).await;
        assert_eq!(status, 200, "{kind}: {answer}");
        assert!(answer["messages"][0]["id"].as_str().unwrap().starts_with("wamid."));
        let accepted = answer["messages"][0].get("message_status").cloned();
        assert_eq!(accepted, (*kind == "template").then(|| json!("accepted")), "{kind}");
    }
    let sent = server.sent(Channel::WhatsApp, USER);
    let kinds: Vec<&str> = sent.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, sends.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    let image = SentMedia {
        kind: "image".to_owned(),
        link: Some("https://example.com/a.png".to_owned()),
        id: None,
        filename: None,
    };
    assert_eq!(sent[0].media.as_ref(), Some(&image));
    assert_eq!(sent[0].text.as_deref(), Some("a cat"));
    let document = sent[1].media.as_ref().unwrap();
    assert_eq!(
        (document.id.as_deref(), document.filename.as_deref()),
        (Some(media.as_str()), Some("a.pdf"))
    );
    assert_eq!(sent[7].text.as_deref(), Some("Pick"));
    let reaction = SentReaction { message_id: wamid.to_owned(), emoji: "👍".to_owned() };
    assert_eq!(sent[8].reaction.as_ref(), Some(&reaction));
    assert_eq!(sent[9].body["template"]["name"], "hello_world");
    assert_eq!(server.sent_texts(Channel::WhatsApp, USER), ["a cat", "Pick"]);
}

#[tokio::test]
async fn the_24_hour_window_lets_only_templates_through() {
    let server = start().await;
    let text = json!({"messaging_product": "whatsapp", "to": USER, "type": "text", "text": {"body": "hi"}});
    let template = json!({"messaging_product": "whatsapp", "to": USER, "type": "template",
                          "template": {"name": "hello_world", "language": {"code": "en_US"}}});
    let refused = |(status, answer): (u16, Value)| {
        assert_eq!(status, 400, "{answer}");
        let e = &answer["error"];
        assert_eq!(e["code"], 131_047, "{answer}");
        assert_eq!(e["message"], "(#131047) Re-engagement message");
        assert_eq!(e["type"], "OAuthException");
        assert_eq!(e["error_data"]["messaging_product"], "whatsapp");
        assert!(e["error_data"]["details"].as_str().unwrap().contains("24 hours"));
        assert!(e["fbtrace_id"].is_string());
    };

    // The user never wrote: only a template goes.
    refused(post(&server, &messages(&server), &text).await);
    assert_eq!(post(&server, &messages(&server), &template).await.0, 200);

    // They write: the window opens.
    server.whatsapp_text(USER, "hello");
    assert_eq!(post(&server, &messages(&server), &text).await.0, 200);

    // More than a day passes.
    server.outside_window(USER);
    refused(post(&server, &messages(&server), &text).await);
    let reaction = json!({"messaging_product": "whatsapp", "to": USER, "type": "reaction",
                          "reaction": {"message_id": "wamid.X", "emoji": "👍"}});
    refused(post(&server, &messages(&server), &reaction).await);
    assert_eq!(post(&server, &messages(&server), &template).await.0, 200);

    server.open_window(USER);
    assert_eq!(post(&server, &messages(&server), &text).await.0, 200);
    let kinds: Vec<_> = server.sent(Channel::WhatsApp, USER).into_iter().map(|m| m.kind).collect();
    assert_eq!(kinds, ["template", "text", "template", "text"]);
}

#[tokio::test]
async fn malformed_sends_get_code_100_and_are_not_recorded() {
    let server = start().await;
    server.whatsapp_text(USER, "hi");
    let bad = [
        json!({"to": USER, "type": "text", "text": {"body": "no product"}}),
        json!({"messaging_product": "whatsapp", "type": "text", "text": {"body": "no to"}}),
        json!({"messaging_product": "whatsapp", "to": "+", "text": {"body": "no digits"}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "fax", "fax": {}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "text"}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "text", "text": {}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "text", "text": {"body": "x".repeat(4097)}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "image", "image": {"caption": "no file"}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "image", "image": {"id": "404"}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "location", "location": {"latitude": 1}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "contacts", "contacts": []}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "interactive", "interactive": {}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "template", "template": {}}),
        json!({"messaging_product": "whatsapp", "to": USER, "type": "reaction", "reaction": {"emoji": "x"}}),
        json!([1]),
    ];
    for body in &bad {
        let (status, answer) = post(&server, &messages(&server), body).await;
        assert_eq!((status, &answer["error"]["code"]), (400, &json!(100)), "{body}: {answer}");
    }
    let url = format!("{}/{}", server.api_url(), messages(&server));
    let not_json = crate::http::client().post(url).bearer_auth(TOKEN).body("{");
    let (status, answer) = call(not_json).await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(100)), "{answer}");
    assert!(server.all_sent().is_empty());
}

#[tokio::test]
async fn read_receipts_are_recorded() {
    let server = start().await;
    let id = server.whatsapp_text(USER, "hi");
    let body = json!({"messaging_product": "whatsapp", "status": "read", "message_id": id});
    let (status, answer) = post(&server, &messages(&server), &body).await;
    assert_eq!((status, answer), (200, json!({"success": true})));
    let (status, _) = post(
        &server,
        &messages(&server),
        &json!({"messaging_product": "whatsapp", "status": "read"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(server.marked_read(), [id]);
    assert!(server.all_sent().is_empty());
}
