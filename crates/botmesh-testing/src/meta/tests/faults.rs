//! Injected faults, tokens and unknown ids, each answered with Graph's status and error JSON.

use serde_json::{Value, json};

use super::super::{Channel, Fault, GraphServer};
use super::{TOKEN, call, get_json, post, start};

/// A send that succeeds on each channel when no fault is queued.
fn send(server: &GraphServer, channel: Channel) -> (String, Value) {
    let path = format!("{}/messages", server.account_id(channel));
    let body = match channel {
        Channel::WhatsApp => {
            json!({"messaging_product": "whatsapp", "to": "1555", "type": "text", "text": {"body": "hi"}})
        }
        _ => {
            json!({"recipient": {"id": "1555"}, "messaging_type": "RESPONSE", "message": {"text": "hi"}})
        }
    };
    (path, body)
}

#[tokio::test]
async fn each_fault_answers_its_status_and_error() {
    let server = start().await;
    server.open_window("1555");
    let cases = [
        (
            Channel::WhatsApp,
            Fault::TooManyRequests,
            429,
            4,
            None,
            "(#4) Application request limit reached",
        ),
        (
            Channel::Messenger,
            Fault::AppRateLimited,
            400,
            4,
            None,
            "(#4) Application request limit reached",
        ),
        (
            Channel::WhatsApp,
            Fault::AccountRateLimited,
            400,
            80_007,
            None,
            "(#80007) Rate limit issues",
        ),
        (
            Channel::WhatsApp,
            Fault::ThroughputLimited,
            400,
            130_429,
            None,
            "(#130429) Rate limit hit",
        ),
        (
            Channel::Instagram,
            Fault::TokenExpired,
            401,
            190,
            Some(463),
            "Error validating access token: Session has expired",
        ),
        (
            Channel::WhatsApp,
            Fault::RecipientGone,
            400,
            131_026,
            None,
            "(#131026) Message Undeliverable",
        ),
        (
            Channel::Messenger,
            Fault::RecipientGone,
            400,
            551,
            Some(1_545_041),
            "(#551) This person isn't available right now.",
        ),
        (
            Channel::WhatsApp,
            Fault::OutsideWindow,
            400,
            131_047,
            None,
            "(#131047) Re-engagement message",
        ),
        (
            Channel::Instagram,
            Fault::OutsideWindow,
            400,
            10,
            Some(2_018_278),
            "(#10) This message is sent outside of allowed window.",
        ),
        (Channel::Messenger, Fault::UnknownError, 500, 1, None, "An unknown error occurred"),
        (
            Channel::WhatsApp,
            Fault::ServiceUnavailable,
            500,
            2,
            None,
            "An unexpected error has occurred.",
        ),
        (
            Channel::Messenger,
            Fault::Error {
                status: 403,
                code: 200,
                subcode: Some(7),
                message: "(#200) Permissions error".to_owned(),
            },
            403,
            200,
            Some(7),
            "(#200) Permissions error",
        ),
    ];
    for (channel, fault, status, code, subcode, message) in cases {
        let label = format!("{channel} {fault:?}");
        server.fail_next(channel, fault);
        let (path, body) = send(&server, channel);
        let (got, answer) = post(&server, &path, &body).await;
        let e = &answer["error"];
        assert_eq!(got, status, "{label}: {answer}");
        assert_eq!(e["code"], code, "{label}");
        assert_eq!(e.get("error_subcode").cloned(), subcode.map(|s| json!(s)), "{label}");
        assert!(e["message"].as_str().unwrap().starts_with(message), "{label}: {answer}");
        assert!(e["type"].is_string() && e["fbtrace_id"].is_string(), "{label}");
        // One fault, one call: the next send goes through.
        assert_eq!(post(&server, &path, &body).await.0, 200, "{label}");
    }
    assert_eq!(server.all_sent().len(), 12);
}

#[tokio::test]
async fn faults_queue_per_channel() {
    let server = start().await;
    server.open_window("1555");
    server.fail_next(Channel::Messenger, Fault::UnknownError);
    server.fail_next(Channel::Messenger, Fault::TooManyRequests);
    let (wa_path, wa_body) = send(&server, Channel::WhatsApp);
    assert_eq!(post(&server, &wa_path, &wa_body).await.0, 200);
    let (path, body) = send(&server, Channel::Messenger);
    assert_eq!(post(&server, &path, &body).await.0, 500);
    assert_eq!(post(&server, &path, &body).await.0, 429);
    assert_eq!(post(&server, &path, &body).await.0, 200);
}

#[tokio::test]
async fn tokens_are_checked() {
    let server = start().await;
    server.open_window("1555");
    let (path, body) = send(&server, Channel::WhatsApp);
    let url = format!("{}/{path}", server.api_url());
    let http = crate::http::client();

    let (status, answer) = call(http.post(&url).json(&body)).await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(104)), "{answer}");
    let (status, answer) = call(http.post(&url).bearer_auth("EAAwrong").json(&body)).await;
    assert_eq!((status, &answer["error"]["code"]), (401, &json!(190)), "{answer}");
    assert!(answer["error"].get("error_subcode").is_none());
    let query = format!("{url}?access_token={TOKEN}");
    assert_eq!(call(http.post(&query).json(&body)).await.0, 200);

    server.expire_token();
    let (status, answer) = call(http.post(&url).bearer_auth(TOKEN).json(&body)).await;
    assert_eq!(status, 401);
    let e = answer["error"].as_object().unwrap();
    let keys: Vec<_> = e.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 5, "{answer}");
    for key in ["message", "type", "code", "error_subcode", "fbtrace_id"] {
        assert!(keys.contains(&key), "{key}: {answer}");
    }
    assert_eq!(e["message"], "Error validating access token: Session has expired");
    assert_eq!(
        (&e["type"], &e["code"], &e["error_subcode"]),
        (&json!("OAuthException"), &json!(190), &json!(463))
    );
    assert_eq!(get_json(&server, server.phone_number_id()).await.0, 401);

    server.restore_token();
    assert_eq!(call(http.post(&url).bearer_auth(TOKEN).json(&body)).await.0, 200);
    assert_eq!(server.all_sent().len(), 2);
}

#[tokio::test]
async fn unknown_ids_and_paths_are_refused() {
    let server = start().await;
    let (_, body) = send(&server, Channel::Messenger);
    let (status, answer) = post(&server, "999/messages", &body).await;
    assert_eq!(status, 400, "{answer}");
    let e = &answer["error"];
    assert_eq!(
        (&e["code"], &e["error_subcode"], &e["type"]),
        (&json!(100), &json!(33), &json!("GraphMethodException"))
    );
    assert!(e["message"].as_str().unwrap().contains("Object with ID '999' does not exist"));
    let (status, answer) = post(&server, "a/b/c", &body).await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(2500)), "{answer}");
    let (status, answer) = get_json(&server, "12345").await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(100)), "{answer}");
    // The business's own objects describe themselves.
    let (status, phone) = get_json(&server, server.phone_number_id()).await;
    assert_eq!(
        (status, &phone["display_phone_number"]),
        (200, &json!(server.display_phone_number()))
    );
    let (status, page) = get_json(&server, "me").await;
    assert_eq!((status, &page["id"]), (200, &json!(server.page_id())));
    assert!(server.all_sent().is_empty());
}
