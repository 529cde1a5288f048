//! Messenger and Instagram sends: Graph's answer, the record, sender actions, `/me`, and
//! malformed sends.

use serde_json::json;

use super::super::{Channel, SentMedia, SentReaction};
use super::{post, start};

#[tokio::test]
async fn messages_are_answered_with_recipient_and_message_ids_and_recorded() {
    let server = start().await;
    for channel in [Channel::Messenger, Channel::Instagram] {
        let path = format!("{}/messages", server.account_id(channel));
        let user = format!("{channel}-user");
        let sends = [
            json!({"recipient": {"id": user}, "messaging_type": "RESPONSE", "message": {"text": "hi"}}),
            json!({"recipient": {"id": user}, "messaging_type": "UPDATE",
                   "message": {"attachment": {"type": "image",
                                              "payload": {"url": "https://example.com/a.png"}}}}),
            json!({"recipient": {"id": user}, "messaging_type": "RESPONSE",
                   "message": {"text": "Pick one", "quick_replies": [
                       {"content_type": "text", "title": "Red", "payload": "RED"},
                       {"content_type": "text", "title": "Blue", "payload": "BLUE"}]}}),
            json!({"recipient": {"id": user}, "messaging_type": "MESSAGE_TAG", "tag": "HUMAN_AGENT",
                   "message": {"text": "later", "reply_to": {"mid": "m_user"}}}),
        ];
        let mut ids = Vec::new();
        for body in &sends {
            let (status, answer) = post(&server, &path, body).await;
            assert_eq!(status, 200, "{channel}: {answer}");
            assert_eq!(answer["recipient_id"], json!(user));
            let id = answer["message_id"].as_str().unwrap().to_owned();
            assert!(id.starts_with("m_"), "{id}");
            assert_eq!(answer.as_object().unwrap().len(), 2, "{answer}");
            ids.push(id);
        }
        let sent = server.sent(channel, &user);
        assert_eq!(sent.len(), 4);
        assert!(sent.iter().all(|m| m.channel == channel));
        let got: Vec<_> = sent.iter().map(|m| m.message_id.clone().unwrap()).collect();
        assert_eq!(got, ids);
        let kinds: Vec<_> = sent.iter().map(|m| m.kind.as_str()).collect();
        assert_eq!(kinds, ["text", "image", "text", "text"]);
        let image = SentMedia {
            kind: "image".to_owned(),
            link: Some("https://example.com/a.png".to_owned()),
            id: None,
            filename: None,
        };
        assert_eq!(sent[1].media.as_ref(), Some(&image));
        assert_eq!(sent[2].body["message"]["quick_replies"][1]["payload"], "BLUE");
        assert_eq!(sent[3].messaging_type.as_deref(), Some("MESSAGE_TAG"));
        assert_eq!(sent[3].reply_to.as_deref(), Some("m_user"));
        assert_eq!(server.sent_texts(channel, &user), ["hi", "Pick one", "later"]);
    }
    assert!(server.sent(Channel::WhatsApp, "messenger-user").is_empty());
}

#[tokio::test]
async fn sender_actions_react_and_type() {
    let server = start().await;
    let path = format!("{}/messages", server.page_id());
    let react = json!({"recipient": {"id": "42"}, "sender_action": "react",
                       "payload": {"message_id": "m_abc", "reaction": "❤"}});
    let (status, answer) = post(&server, &path, &react).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["recipient_id"], "42");
    assert!(answer["message_id"].as_str().unwrap().starts_with("m_"));
    let (status, answer) =
        post(&server, &path, &json!({"recipient": {"id": 42}, "sender_action": "typing_on"})).await;
    assert_eq!((status, answer), (200, json!({"recipient_id": "42"})));
    let (status, answer) =
        post(&server, &path, &json!({"recipient": {"id": "42"}, "sender_action": "dance"})).await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(100)), "{answer}");

    let sent = server.sent(Channel::Messenger, "42");
    let kinds: Vec<_> = sent.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["react", "typing_on"]);
    let reaction = SentReaction { message_id: "m_abc".to_owned(), emoji: "❤".to_owned() };
    assert_eq!(sent[0].reaction.as_ref(), Some(&reaction));
    assert!(sent[1].message_id.is_none());
    assert!(server.sent_texts(Channel::Messenger, "42").is_empty());
}

#[tokio::test]
async fn me_is_the_page_unless_the_user_only_wrote_on_instagram() {
    let server = start().await;
    server.instagram_text("ig-1", "hi");
    server.messenger_text("both", "hi");
    server.instagram_text("both", "hi");
    for user in ["ig-1", "both", "stranger"] {
        let body = json!({"recipient": {"id": user}, "message": {"text": "via me"}});
        assert_eq!(post(&server, "me/messages", &body).await.0, 200);
    }
    assert_eq!(server.sent_texts(Channel::Instagram, "ig-1"), ["via me"]);
    assert_eq!(server.sent_texts(Channel::Messenger, "both"), ["via me"]);
    assert_eq!(server.sent_texts(Channel::Messenger, "stranger"), ["via me"]);
    assert_eq!(server.all_sent().len(), 3);
}

#[tokio::test]
async fn malformed_sends_get_code_100_and_are_not_recorded() {
    let server = start().await;
    let path = format!("{}/messages", server.page_id());
    let bad = [
        json!({"message": {"text": "no recipient"}}),
        json!({"recipient": {"id": ""}, "message": {"text": "empty recipient"}}),
        json!({"recipient": {"id": "1"}}),
        json!({"recipient": {"id": "1"}, "message": {}}),
        json!({"recipient": {"id": "1"}, "message": {"text": "x".repeat(2001)}}),
        json!({"recipient": {"id": "1"}, "messaging_type": "SPAM", "message": {"text": "t"}}),
        json!({"recipient": {"id": "1"}, "messaging_type": "MESSAGE_TAG", "message": {"text": "t"}}),
        json!({"recipient": {"id": "1"}, "message": {"attachment": {"type": "hologram", "payload": {}}}}),
        json!({"recipient": {"id": "1"}, "message": {"attachment": {"type": "image", "payload": {}}}}),
        json!({"recipient": {"id": "1"}, "message": {"text": "t", "quick_replies": vec![json!({}); 14]}}),
        json!({"recipient": {"id": "1"}, "sender_action": "react", "payload": {"message_id": "m_1"}}),
    ];
    for body in &bad {
        let (status, answer) = post(&server, &path, body).await;
        assert_eq!((status, &answer["error"]["code"]), (400, &json!(100)), "{body}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().starts_with("(#100)"), "{answer}");
    }
    assert!(server.all_sent().is_empty());
}
