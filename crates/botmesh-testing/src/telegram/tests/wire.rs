//! The wire protocol as other clients speak it: method names in any case, parameters as
//! forms and query strings, and malformed requests, answered with the JSON envelope.

use serde_json::{Value, json};

use super::super::{Fault, TelegramServer};
use super::TOKEN;

/// Calls `path` (after the base URL) and returns the status and the JSON answer.
async fn call(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap();
    (status, body)
}

fn url(server: &TelegramServer, method: &str) -> String {
    format!("{}/bot{TOKEN}/{method}", server.api_url())
}

#[tokio::test]
async fn method_names_match_in_any_case_and_any_http_method() {
    let server = TelegramServer::start().await.unwrap();
    let http = crate::http::client();
    for name in ["getMe", "GetMe", "getme", "GETME"] {
        let (status, body) = call(http.get(url(&server, name))).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(body["ok"], true);
        assert_eq!(body["result"]["username"], "botmesh_test_bot");
    }
    let (status, _) = call(http.post(url(&server, "getMe"))).await;
    assert_eq!(status, 200);
    assert_eq!(server.call_count("getMe"), 5);
}

#[tokio::test]
async fn parameters_come_as_json_form_or_query() {
    let server = TelegramServer::start().await.unwrap();
    let http = crate::http::client();
    let (status, body) =
        call(http.post(url(&server, "sendMessage")).json(&json!({"chat_id": 1, "text": "json"})))
            .await;
    assert_eq!((status, &body["result"]["text"]), (200, &json!("json")));
    let form = http
        .post(url(&server, "sendMessage"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("chat_id=1&text=form%20body&reply_markup=%7B%22inline_keyboard%22%3A%5B%5D%7D");
    let (status, body) = call(form).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        call(http.get(url(&server, "sendMessage") + "?chat_id=1&text=query")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.sent_texts(1), ["json", "form body", "query"]);
    assert_eq!(server.sent(1)[1].reply_markup, Some(json!({"inline_keyboard": []})));
}

#[tokio::test]
async fn malformed_requests_get_400_with_the_envelope() {
    let server = TelegramServer::start().await.unwrap();
    let http = crate::http::client();
    let bad = [
        http.post(url(&server, "sendMessage")).header("content-type", "application/json").body("{"),
        http.post(url(&server, "sendMessage"))
            .header("content-type", "application/json")
            .body("[1]"),
        http.post(url(&server, "sendMessage")).json(&json!({"chat_id": {"x": 1}, "text": "t"})),
        http.post(url(&server, "sendMessage")).json(&json!({"text": "no chat"})),
        http.post(url(&server, "sendMessage"))
            .json(&json!({"chat_id": 1, "text": "t", "parse_mode": "rtf"})),
        http.post(url(&server, "sendMessage"))
            .json(&json!({"chat_id": 1, "text": "t", "reply_markup": "{"})),
        http.post(url(&server, "getUpdates")).json(&json!({"offset": "soon"})),
        http.post(url(&server, "sendPhoto")).json(&json!({"chat_id": 1})),
        http.post(url(&server, "sendPhoto")).json(&json!({"chat_id": 1, "photo": "attach://gone"})),
        http.post(url(&server, "setWebhook")).json(&json!({"url": "ftp://x"})),
        http.post(url(&server, "setWebhook"))
            .json(&json!({"url": "http://x/", "secret_token": "a b"})),
        http.post(url(&server, "answerCallbackQuery")).json(&json!({})),
        http.post(url(&server, "getFile")).json(&json!({})),
        http.post(url(&server, "sendMessage"))
            .header("content-type", "multipart/form-data; boundary=x")
            .body("garbage"),
    ];
    for (i, request) in bad.into_iter().enumerate() {
        let (status, body) = call(request).await;
        assert_eq!(status, 400, "request {i}: {body}");
        assert_eq!(body["ok"], false, "request {i}");
        assert_eq!(body["error_code"], 400, "request {i}");
        assert!(body["description"].as_str().unwrap().starts_with("Bad Request: "), "{body}");
    }
    assert!(server.all_sent().is_empty());
    assert!(server.webhook().is_none());
}

#[tokio::test]
async fn unknown_methods_and_paths_get_404_and_bad_tokens_401() {
    let server = TelegramServer::start().await.unwrap();
    let http = crate::http::client();
    let base = server.api_url();
    for path in
        ["/bot123:abc/editMessageText", "/nothing", "/123:abc/getMe", "/file/bot123:abc/none"]
    {
        let (status, body) = call(http.get(format!("{base}{path}"))).await;
        assert_eq!((status, &body["description"]), (404, &json!("Not Found")), "{path}");
        assert_eq!(body["ok"], false);
    }
    for token in ["nonsense", "abc:def", "123:"] {
        let (status, body) = call(http.get(format!("{base}/bot{token}/getMe"))).await;
        assert_eq!((status, &body["description"]), (401, &json!("Unauthorized")), "{token}");
    }
    let strict = TelegramServer::builder().token("9:right").start().await.unwrap();
    let (status, _) = call(http.get(format!("{}/bot9:wrong/getMe", strict.api_url()))).await;
    assert_eq!(status, 401);
    let (status, body) = call(http.get(format!("{}/bot9:right/getMe", strict.api_url()))).await;
    assert_eq!((status, &body["result"]["id"]), (200, &json!(9)));
}

#[tokio::test]
async fn injected_faults_answer_in_the_envelope_in_order() {
    let server = TelegramServer::start().await.unwrap();
    let http = crate::http::client();
    server.fail_next("getMe", Fault::ServerError(502));
    server.fail_next(
        "getMe",
        Fault::TooManyRequests { retry_after: std::time::Duration::from_millis(1500) },
    );
    let (status, body) = call(http.get(url(&server, "getMe"))).await;
    assert_eq!((status, &body["description"]), (502, &json!("Bad Gateway")));
    let (status, body) = call(http.get(url(&server, "getMe"))).await;
    assert_eq!(status, 429);
    assert_eq!(body["parameters"]["retry_after"], 2);
    assert_eq!(body["description"], "Too Many Requests: retry after 2");
    let (status, _) = call(http.get(url(&server, "getMe"))).await;
    assert_eq!(status, 200);
    // A revoked token also closes downloads.
    let file_id = server.register_file(b"x".to_vec());
    let (_, body) = call(http.get(url(&server, "getFile") + "?file_id=" + &file_id)).await;
    let path = body["result"]["file_path"].as_str().unwrap().to_owned();
    let file = format!("{}/file/bot{TOKEN}/{path}", server.api_url());
    assert_eq!(http.get(&file).send().await.unwrap().bytes().await.unwrap().as_ref(), b"x");
    server.revoke_token();
    assert_eq!(http.get(&file).send().await.unwrap().status().as_u16(), 401);
}
