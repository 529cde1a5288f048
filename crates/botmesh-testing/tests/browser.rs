//! `browser::Browser` against a page served on loopback: read an element, reload until its text
//! changes, time out on a text that never comes, and save a screenshot. Needs `chromium` and
//! `chromium-driver` (`.ci/run` installs them); without them the test fails and says so.
#![cfg(feature = "browser")]
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh_testing::browser::{Browser, BrowserError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The first bytes of every PNG file.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Serves a page whose `#count` is the number of times it was loaded; returns its URL.
async fn counter_page() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let loads = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, loads.clone()));
        }
    });
    url
}

/// Answers one request: the page for `/`, 404 for anything else (the favicon).
async fn answer(mut stream: TcpStream, loads: Arc<AtomicUsize>) {
    let mut request = Vec::new();
    let mut chunk = [0; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request);
    let (status, body) = if request.starts_with("GET / ") {
        let n = loads.fetch_add(1, Ordering::SeqCst) + 1;
        let body = format!(
            "<!doctype html><html><head><title>Counter</title></head>\
             <body><h1>Counter</h1><p>Loaded <span id=\"count\">{n}</span> times</p></body></html>"
        );
        ("200 OK", body)
    } else {
        ("404 Not Found", String::new())
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[tokio::test]
async fn a_page_is_read_reloaded_and_photographed() {
    let url = counter_page().await;
    let browser = Browser::start().await.unwrap();

    browser.goto(&url).await.unwrap();
    assert_eq!(browser.text("h1").await.unwrap(), "Counter");
    assert_eq!(browser.text("#count").await.unwrap(), "1");
    assert_eq!(browser.client().title().await.unwrap(), "Counter");

    browser.refresh().await.unwrap();
    let count =
        browser.wait_for_text("#count", Duration::from_secs(10), |t| t != "1").await.unwrap();
    assert_eq!(count, "2");

    let never = browser.wait_for_text("#count", Duration::from_millis(300), |t| t == "9").await;
    match never {
        Err(BrowserError::Timeout { last, .. }) => assert_eq!(last.as_deref(), Some("2")),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let missing = browser.wait_for_text("#nothing", Duration::from_millis(300), |_| true).await;
    assert!(matches!(missing, Err(BrowserError::Timeout { last: None, .. })), "{missing:?}");

    let png = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser").join("counter.png");
    let _ = std::fs::remove_file(&png);
    browser.screenshot(&png).await.unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(PNG_SIGNATURE), "{} is not a PNG", png.display());

    browser.close().await.unwrap();
}
