//! The stand-in driven over HTTP with reqwest, as a bot's client drives it, and its webhook
//! deliveries taken by small axum receivers that check the signature as a bot must.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::time::Instant;

use super::GraphServer;

mod faults;
mod media;
mod messaging;
mod webhook;
mod whatsapp;

/// The access token the tests' bot uses.
const TOKEN: &str = "EAAtest-token";

/// How long a test waits for something that should happen at once.
const SOON: Duration = Duration::from_secs(5);

/// A server that accepts only [`TOKEN`] and retries deliveries quickly.
async fn start() -> GraphServer {
    GraphServer::builder()
        .access_token(TOKEN)
        .webhook_retry(Duration::from_millis(20), Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

/// Sends a request and returns the status and the JSON answer.
async fn call(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap();
    (status, body)
}

/// `POST {api_url}/{path}` with the token and a JSON body.
async fn post(server: &GraphServer, path: &str, body: &Value) -> (u16, Value) {
    let url = format!("{}/{path}", server.api_url());
    call(crate::http::client().post(url).bearer_auth(TOKEN).json(body)).await
}

/// `GET {api_url}/{path}` with the token.
async fn get_json(server: &GraphServer, path: &str) -> (u16, Value) {
    let url = format!("{}/{path}", server.api_url());
    call(crate::http::client().get(url).bearer_auth(TOKEN)).await
}

/// The lowercase hex HMAC-SHA256 of a body, computed here independently of the stand-in.
fn expected_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// One webhook POST a receiver got.
#[derive(Debug, Clone)]
struct Hit {
    at: Instant,
    body: Value,
    raw: Vec<u8>,
    signature: Option<String>,
    content_type: Option<String>,
    /// What the receiver answered.
    status: u16,
}

impl Hit {
    /// Whether the raw body contains a string (a message id, a text).
    fn has(&self, needle: &str) -> bool {
        String::from_utf8_lossy(&self.raw).contains(needle)
    }
}

/// What a receiver checks and answers.
#[derive(Debug, Default)]
struct Seen {
    secret: String,
    verify_token: String,
    /// Statuses to answer the next POSTs with, in arrival order; then 200.
    answers: VecDeque<u16>,
    /// Strings whose first body containing them is answered 503.
    refuse_once: HashSet<String>,
    hits: Vec<Hit>,
    /// The `hub.challenge`s the handshake brought.
    challenges: Vec<String>,
}

/// A bot's webhook endpoint on a free port: it answers 403 to a body whose
/// `X-Hub-Signature-256` is not the app secret's HMAC of the raw bytes, else the scripted
/// status, and answers the handshake with the challenge when the verify token matches.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

impl Receiver {
    async fn start(server: &GraphServer) -> Self {
        let seen = Arc::new(Mutex::new(Seen {
            secret: server.app_secret().to_owned(),
            verify_token: server.verify_token().to_owned(),
            ..Seen::default()
        }));
        let app = Router::new()
            .route("/webhook", get(handshake).post(receive))
            .with_state(Arc::clone(&seen));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen }
    }

    fn answer(&self, statuses: &[u16]) {
        self.seen.lock().unwrap().answers.extend(statuses);
    }

    fn refuse_once(&self, needle: &str) {
        self.seen.lock().unwrap().refuse_once.insert(needle.to_owned());
    }

    fn hits(&self) -> Vec<Hit> {
        self.seen.lock().unwrap().hits.clone()
    }
}

async fn receive(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    raw: Bytes,
) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut seen = seen.lock().unwrap();
    let signature = header("x-hub-signature-256");
    let signed = signature.as_deref() == Some(expected_signature(&seen.secret, &raw).as_str());
    let text = String::from_utf8_lossy(&raw).into_owned();
    let refused = seen.refuse_once.iter().find(|n| text.contains(n.as_str())).cloned();
    let status = if !signed {
        403
    } else if let Some(needle) = refused {
        seen.refuse_once.remove(&needle);
        503
    } else {
        seen.answers.pop_front().unwrap_or(200)
    };
    seen.hits.push(Hit {
        at: Instant::now(),
        body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
        raw: raw.to_vec(),
        signature,
        content_type: header("content-type"),
        status,
    });
    StatusCode::from_u16(status).unwrap()
}

async fn handshake(
    State(seen): State<Arc<Mutex<Seen>>>,
    Query(query): Query<Vec<(String, String)>>,
) -> (StatusCode, String) {
    let param = |k: &str| query.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let mut seen = seen.lock().unwrap();
    let challenge = param("hub.challenge").unwrap_or_default();
    seen.challenges.push(challenge.clone());
    if param("hub.mode").as_deref() == Some("subscribe")
        && param("hub.verify_token").as_deref() == Some(seen.verify_token.as_str())
    {
        (StatusCode::OK, challenge)
    } else {
        (StatusCode::FORBIDDEN, String::new())
    }
}

/// A URL nobody listens on: a port bound, then freed.
async fn dead_url() -> String {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", closed.local_addr().unwrap());
    drop(closed);
    url
}
