//! Media: lookup, download with the token, uploads, and public attachment URLs.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::super::{Channel, Inbound};
use super::{Receiver, SOON, TOKEN, call, get_json, post, start};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot really a picture";

#[tokio::test]
async fn lookup_then_download_with_the_token() {
    let server = start().await;
    let id = server.register_media(PNG, "image/png");
    let (status, info) = get_json(&server, &id).await;
    assert_eq!(status, 200, "{info}");
    let sha: String = Sha256::digest(PNG).iter().map(|b| format!("{b:02x}")).collect();
    let url = format!("{}/media-download/{id}", server.base_url());
    assert_eq!(
        info,
        json!({
            "url": url,
            "mime_type": "image/png",
            "sha256": sha,
            "file_size": PNG.len(),
            "id": id,
            "messaging_product": "whatsapp",
        })
    );

    let http = crate::http::client();
    let response = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    assert_eq!(response.bytes().await.unwrap(), PNG);

    let (status, answer) = call(http.get(&url)).await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!(104)));
    let (status, answer) = call(http.get(&url).bearer_auth("EAAwrong")).await;
    assert_eq!((status, &answer["error"]["code"]), (401, &json!(190)));
    server.expire_token();
    assert_eq!(call(http.get(&url).bearer_auth(TOKEN)).await.0, 401);
    assert_eq!(get_json(&server, &id).await.0, 401);
    server.restore_token();

    let gone = format!("{}/media-download/1", server.base_url());
    assert_eq!(call(http.get(gone).bearer_auth(TOKEN)).await.0, 404);
    let (status, answer) = get_json(&server, "1").await;
    assert_eq!((status, &answer["error"]["error_subcode"]), (400, &json!(33)));
}

#[tokio::test]
async fn an_upload_gets_an_id_that_sends_can_name() {
    let server = start().await;
    let mut body = Vec::new();
    for (name, value) in [("messaging_product", "whatsapp"), ("type", "image/png")] {
        body.extend_from_slice(
            format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n\
          Content-Type: image/png\r\n\r\n",
    );
    body.extend_from_slice(PNG);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    let url = format!("{}/{}/media", server.api_url(), server.phone_number_id());
    let upload = crate::http::client()
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "multipart/form-data; boundary=XyZ")
        .body(body);
    let (status, answer) = call(upload).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["id"].as_str().unwrap().to_owned();
    assert_eq!(server.media(&id), Some((PNG.to_vec(), "image/png".to_owned())));

    server.whatsapp_text("1555", "send me the picture");
    let send = json!({"messaging_product": "whatsapp", "to": "1555", "type": "image", "image": {"id": id}});
    let path = format!("{}/messages", server.phone_number_id());
    assert_eq!(post(&server, &path, &send).await.0, 200);
    let sent = server.sent(Channel::WhatsApp, "1555");
    assert_eq!(sent[0].media.as_ref().unwrap().id.as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn users_media_reach_the_bot_by_id_or_public_url() {
    let server = start().await;
    let receiver = Receiver::start(&server).await;
    server.subscribe(&receiver.url);
    let wa = server.send_media(
        Channel::WhatsApp,
        "1555",
        "document",
        PNG,
        "application/pdf",
        Some("bill"),
    );
    let fb = server.send_media(Channel::Messenger, "77", "image", PNG, "image/png", None);
    assert!(server.wait_for_all_delivered(SOON).await);

    let hits = receiver.hits();
    let wa_hit = hits.iter().find(|h| h.has(&wa)).unwrap();
    let m = &wa_hit.body["entry"][0]["changes"][0]["value"]["messages"][0];
    assert_eq!((&m["type"], &m["document"]["caption"]), (&json!("document"), &json!("bill")));
    let media_id = m["document"]["id"].as_str().unwrap();
    assert_eq!(m["document"]["mime_type"], "application/pdf");
    let (status, info) = get_json(&server, media_id).await;
    assert_eq!((status, &info["sha256"]), (200, &m["document"]["sha256"]));

    let fb_hit = hits.iter().find(|h| h.has(&fb)).unwrap();
    let attachment = &fb_hit.body["entry"][0]["messaging"][0]["message"]["attachments"][0];
    assert_eq!(attachment["type"], "image");
    let url = attachment["payload"]["url"].as_str().unwrap();
    // A CDN URL: no token needed.
    let bytes = reqwest::get(url).await.unwrap().bytes().await.unwrap();
    assert_eq!(bytes, PNG);

    // Media the test registers can go in any item.
    let id = server.register_media(b"ogg".to_vec(), "audio/ogg");
    let voice = server.deliver(Inbound::media(Channel::WhatsApp, "1555", "voice", &id, None));
    assert!(server.wait_for_all_delivered(SOON).await);
    let hit = receiver.hits().into_iter().find(|h| h.has(&voice)).unwrap();
    let m = &hit.body["entry"][0]["changes"][0]["value"]["messages"][0];
    assert_eq!(
        (&m["type"], &m["audio"]["voice"], &m["audio"]["id"]),
        (&json!("audio"), &json!(true), &json!(id))
    );
}
