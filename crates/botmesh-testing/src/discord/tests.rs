//! The stand-in spoken to by hand: the gateway protocol over a plain websocket client, the API
//! over plain HTTP.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{Author, DiscordServer, Fault};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(server: &DiscordServer) -> (Ws, Value) {
    let url = format!("ws://{}/gateway?v=10&encoding=json", server.addr());
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let hello = next(&mut ws).await.unwrap();
    (ws, hello)
}

/// The next JSON frame, or `None` when the connection closed (or nothing came for 500 ms).
async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(Duration::from_millis(500), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(serde_json::from_str(&t).unwrap()),
            Ok(Some(Ok(Message::Close(frame)))) => {
                return Some(json!({"closed": frame.map(|f| u16::from(f.code))}));
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) | Err(_) => return None,
        }
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

async fn identify(ws: &mut Ws, token: &str) -> Value {
    send(ws, json!({"op": 2, "d": {"token": token, "intents": 513, "properties": {}}})).await;
    next(ws).await.unwrap()
}

#[tokio::test]
async fn a_session_identifies_heartbeats_and_receives_numbered_dispatches() {
    let server =
        DiscordServer::builder().heartbeat_interval(Duration::from_secs(5)).start().await.unwrap();
    let (mut ws, hello) = connect(&server).await;
    assert_eq!(hello["op"], 10);
    assert_eq!(hello["d"]["heartbeat_interval"], 5000);
    let ready = identify(&mut ws, "Bot discord-test-token").await;
    assert_eq!((ready["t"].as_str(), ready["s"].as_u64()), (Some("READY"), Some(1)));
    assert_eq!(ready["d"]["user"]["id"], server.bot_id().to_string());
    assert_eq!(server.live_sessions(), 1);
    send(&mut ws, json!({"op": 1, "d": 1})).await;
    assert_eq!(next(&mut ws).await.unwrap()["op"], 11);
    let id = server.user_says(7, &Author::in_guild(42, "ana", 9), "hi");
    let m = next(&mut ws).await.unwrap();
    assert_eq!((m["t"].as_str(), m["s"].as_u64()), (Some("MESSAGE_CREATE"), Some(2)));
    assert_eq!(m["d"]["id"], id.to_string());
    assert_eq!(m["d"]["guild_id"], "9");
    server.stop_acking();
    send(&mut ws, json!({"op": 1, "d": 2})).await;
    assert!(next(&mut ws).await.is_none(), "no acknowledgement once told to stop");
    ws.close(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!((server.live_sessions(), server.max_live_sessions()), (0, 1));
}

#[tokio::test]
async fn a_wrong_token_is_closed_with_4004_and_never_live() {
    let server = DiscordServer::start().await.unwrap();
    let (mut ws, _) = connect(&server).await;
    let closed = identify(&mut ws, "nope").await;
    assert_eq!(closed, json!({"closed": 4004}));
    assert_eq!((server.refused_identifies(), server.max_live_sessions()), (1, 0));
}

#[tokio::test]
async fn a_resume_replays_what_was_missed_and_an_invalid_session_is_refused() {
    let server = DiscordServer::start().await.unwrap();
    let (mut ws, _) = connect(&server).await;
    let ready = identify(&mut ws, "discord-test-token").await;
    let session = ready["d"]["session_id"].as_str().unwrap().to_owned();
    server.user_says(7, &Author::dm(42, "ana"), "missed");
    drop(ws);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.live_sessions(), 0);
    let (mut ws, _) = connect(&server).await;
    let resume =
        json!({"op": 6, "d": {"token": "discord-test-token", "session_id": session, "seq": 1}});
    send(&mut ws, resume.clone()).await;
    let replayed = next(&mut ws).await.unwrap();
    assert_eq!(
        (replayed["s"].as_u64(), replayed["d"]["content"].as_str()),
        (Some(2), Some("missed"))
    );
    let resumed = next(&mut ws).await.unwrap();
    assert_eq!((resumed["t"].as_str(), resumed["s"].as_u64()), (Some("RESUMED"), Some(3)));
    assert_eq!((server.live_sessions(), server.resumes()), (1, 1));
    server.invalidate_sessions(false);
    assert_eq!(next(&mut ws).await.unwrap(), json!({"op": 9, "d": false}));
    assert_eq!(server.live_sessions(), 0);
    let (mut ws, _) = connect(&server).await;
    send(&mut ws, resume).await;
    assert_eq!(next(&mut ws).await.unwrap(), json!({"op": 9, "d": false}));
}

#[tokio::test]
async fn the_api_records_sends_reactions_and_callbacks_and_injects_faults() {
    let server = DiscordServer::start().await.unwrap();
    // reqwest may be built with rustls by another crate of the workspace: a client then needs a
    // crypto provider, ring as everywhere else here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let api = format!("{}/api/v10", server.url());
    let auth = "Bot discord-test-token";
    let refused = http.get(format!("{api}/gateway/bot")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let bot: Value = http
        .get(format!("{api}/gateway/bot"))
        .header("authorization", auth)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bot["url"], format!("ws://{}/gateway", server.addr()));
    assert_eq!(bot["session_start_limit"]["remaining"], 1000);
    let body = json!({
        "content": "pick", "message_reference": {"message_id": "5"},
        "components": [{"type": 1, "components": [{"type": 2, "style": 1, "custom_id": "y", "label": "Yes"}]}],
    });
    let post = || {
        http.post(format!("{api}/channels/7/messages")).header("authorization", auth).json(&body)
    };
    let created: Value = post().send().await.unwrap().json().await.unwrap();
    let sent = server.sent();
    assert_eq!(created["id"], sent[0].id.to_string());
    assert_eq!(
        (sent[0].channel, sent[0].reply_to, sent[0].buttons[0].custom_id.as_str()),
        (7, Some(5), "y")
    );
    server.fail_next_send(Fault::RateLimited {
        retry_after: Duration::from_millis(250),
        header: false,
    });
    let limited = post().send().await.unwrap();
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().get("retry-after").is_none());
    assert_eq!(limited.json::<Value>().await.unwrap()["retry_after"], 0.25);
    let reacted = http
        .put(format!("{api}/channels/7/messages/5/reactions/%F0%9F%91%8D/@me"))
        .header("authorization", auth)
        .send()
        .await
        .unwrap();
    assert_eq!(reacted.status(), 204);
    assert_eq!(server.reactions()[0].emoji, "👍");
    let pressed = server.press_button(&Author::dm(42, "ana"), sent[0].id, "y");
    let callback = format!("{api}/interactions/{pressed}/tok/callback");
    let ack = http.post(&callback).json(&json!({"type": 6})).send().await.unwrap();
    assert_eq!(ack.status(), 204);
    let again = http.post(&callback).json(&json!({"type": 6})).send().await.unwrap();
    assert_eq!(again.status(), 400, "an interaction is acknowledged once");
    let callbacks = server.callbacks();
    assert_eq!((callbacks.len(), callbacks[0].kind, callbacks[0].interaction), (1, 6, pressed));
}
