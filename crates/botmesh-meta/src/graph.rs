//! The Graph API: what each channel's send looks like, and its errors as the contract's.

use std::time::Duration;

use botmesh_traits::{Error, MediaKind, MediaSource, Outbound, OutboundContent};
use serde_json::{Value, json};

use crate::channel::Channel;

/// The wait a rate-limit error implies when Meta does not say (it names no retry time for most).
const RATE_LIMIT_WAIT: Duration = Duration::from_secs(1);

/// The JSON body of `POST /{account}/messages` for `message`, or why it cannot go out.
pub(crate) fn body(channel: &Channel, message: &Outbound) -> Result<Value, Error> {
    match channel {
        Channel::WhatsApp { .. } => whatsapp(message),
        Channel::Messenger { .. } | Channel::Instagram { .. } => messenger(message),
    }
}

fn unsupported() -> Error {
    Error::Unsupported { op: "this content on this Meta channel" }
}

fn whatsapp_media(source: &MediaSource) -> Result<Value, Error> {
    match source {
        MediaSource::Url { url } if url.starts_with("https://") || url.starts_with("http://") => {
            Ok(json!({ "link": url }))
        }
        MediaSource::Url { url } => Ok(json!({ "id": url })),
        // Uploading needs the media endpoint first; give a link or a media id instead.
        _ => Err(Error::Unsupported { op: "sending media from bytes on WhatsApp" }),
    }
}

fn whatsapp(message: &Outbound) -> Result<Value, Error> {
    let to = message.chat.as_str();
    let mut body =
        json!({ "messaging_product": "whatsapp", "recipient_type": "individual", "to": to });
    match &message.content {
        OutboundContent::Text { body: text } => {
            body["type"] = json!("text");
            body["text"] = json!({ "body": text });
        }
        OutboundContent::Buttons { body: text, buttons } if buttons.len() <= 3 => {
            let buttons: Vec<Value> = buttons
                .iter()
                .map(|b| json!({"type": "reply", "reply": {"id": b.id, "title": b.title}}))
                .collect();
            body["type"] = json!("interactive");
            body["interactive"] =
                json!({"type": "button", "body": {"text": text}, "action": {"buttons": buttons}});
        }
        OutboundContent::Buttons { body: text, buttons } => {
            let rows: Vec<Value> =
                buttons.iter().map(|b| json!({"id": b.id, "title": b.title})).collect();
            body["type"] = json!("interactive");
            body["interactive"] = json!({"type": "list", "body": {"text": text},
                "action": {"button": "Choose", "sections": [{"title": "Options", "rows": rows}]}});
        }
        OutboundContent::Media { kind, source, caption } => {
            let kind = match kind {
                MediaKind::Image => "image",
                MediaKind::Video => "video",
                MediaKind::Audio => "audio",
                MediaKind::Sticker => "sticker",
                _ => "document",
            };
            let mut media = whatsapp_media(source)?;
            if let Some(caption) = caption.as_ref().filter(|_| kind != "audio" && kind != "sticker")
            {
                media["caption"] = json!(caption);
            }
            body["type"] = json!(kind);
            body[kind] = media;
        }
        OutboundContent::Location { latitude, longitude, name } => {
            body["type"] = json!("location");
            body["location"] = json!({"latitude": latitude, "longitude": longitude, "name": name});
        }
        OutboundContent::Reaction { to: of, emoji } => {
            body["type"] = json!("reaction");
            body["reaction"] =
                json!({"message_id": of.as_str(), "emoji": emoji.clone().unwrap_or_default()});
        }
        OutboundContent::Template { name, language, params } => {
            let params: Vec<Value> =
                params.iter().map(|p| json!({"type": "text", "text": p})).collect();
            body["type"] = json!("template");
            body["template"] = json!({"name": name, "language": {"code": language},
                "components": [{"type": "body", "parameters": params}]});
        }
        _ => return Err(unsupported()),
    }
    if let Some(reply) = &message.reply_to {
        body["context"] = json!({ "message_id": reply.as_str() });
    }
    Ok(body)
}

fn messenger(message: &Outbound) -> Result<Value, Error> {
    let recipient = json!({ "id": message.chat.as_str() });
    let content = match &message.content {
        OutboundContent::Text { body } => json!({ "text": body }),
        OutboundContent::Buttons { body, buttons } => {
            let replies: Vec<Value> = buttons
                .iter()
                .map(|b| json!({"content_type": "text", "title": b.title, "payload": b.id}))
                .collect();
            json!({ "text": body, "quick_replies": replies })
        }
        OutboundContent::Media { kind, source: MediaSource::Url { url }, .. } => {
            let kind = match kind {
                MediaKind::Image | MediaKind::Sticker => "image",
                MediaKind::Video => "video",
                MediaKind::Audio => "audio",
                _ => "file",
            };
            json!({"attachment": {"type": kind, "payload": {"url": url, "is_reusable": true}}})
        }
        OutboundContent::Reaction { to, emoji } => {
            let action = if emoji.is_some() { "react" } else { "unreact" };
            return Ok(json!({
                "recipient": recipient,
                "sender_action": action,
                "payload": {"message_id": to.as_str(), "reaction": emoji.as_deref().unwrap_or("love")},
            }));
        }
        _ => return Err(unsupported()),
    };
    let mut body =
        json!({ "recipient": recipient, "messaging_type": "RESPONSE", "message": content });
    if let Some(reply) = &message.reply_to {
        body["reply_to"] = json!({ "mid": reply.as_str() });
    }
    Ok(body)
}

/// The id Meta gave a sent message: WhatsApp's `messages[0].id`, Messenger's `message_id`.
pub(crate) fn sent_id(reply: &Value) -> Option<String> {
    reply
        .pointer("/messages/0/id")
        .or_else(|| reply.get("message_id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What a failed Graph call means, from its status and `{"error": {...}}` body.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Throttled: wait, then try again.
    RateLimited(Duration),
    /// The access token expired or was revoked: the transport is closed until it is replaced.
    TokenExpired,
    /// The user cannot be reached.
    RecipientGone,
    /// Only a template may go out now (WhatsApp's 24-hour window).
    WindowClosed,
    /// Meta failed on its side before taking the request: worth another try.
    Transient(String),
    /// The request may or may not have gone through (a timeout, a reset, an unexplained 5xx):
    /// not sent again here, where it could be delivered twice.
    Uncertain(String),
    /// Anything else: the request is wrong.
    Other(String),
}

/// Classifies a failed Graph call.
pub(crate) fn failure(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Failure {
    let error: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let code = error.pointer("/error/code").and_then(Value::as_i64).unwrap_or(0);
    let subcode = error.pointer("/error/error_subcode").and_then(Value::as_i64).unwrap_or(0);
    let message = error
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map_or_else(|| format!("HTTP {status}"), str::to_owned);
    match (status, code, subcode) {
        (429, ..) | (_, 4 | 17 | 32 | 613 | 80007 | 130_429 | 131_048 | 131_056, _) => {
            Failure::RateLimited(retry_after.unwrap_or(RATE_LIMIT_WAIT))
        }
        (_, 190, _) | (401, ..) => Failure::TokenExpired,
        (_, 131_047, _) | (_, 10, 2_018_278) => Failure::WindowClosed,
        (_, 131_026 | 551, _) | (_, 100, 2_018_001) => Failure::RecipientGone,
        // Meta's documented "not processed, try again" answers.
        (_, 1 | 2 | 131_000 | 131_016 | 133_004, _) => Failure::Transient(message),
        // A 5xx without one of those codes may have gone through: not sent again here.
        (500..=599, ..) => Failure::Uncertain(message),
        _ => Failure::Other(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_errors_are_classified_by_code() {
        let body = |code: i64, sub: i64| {
            json!({"error": {"message": "x", "code": code, "error_subcode": sub}}).to_string()
        };
        assert!(matches!(failure(400, None, body(130_429, 0).as_bytes()), Failure::RateLimited(_)));
        assert!(matches!(failure(401, None, body(190, 463).as_bytes()), Failure::TokenExpired));
        assert!(matches!(failure(400, None, body(131_047, 0).as_bytes()), Failure::WindowClosed));
        assert!(matches!(failure(400, None, body(131_026, 0).as_bytes()), Failure::RecipientGone));
        assert!(matches!(failure(500, None, body(2, 0).as_bytes()), Failure::Transient(_)));
        assert!(matches!(failure(400, None, body(131_016, 0).as_bytes()), Failure::Transient(_)));
        assert!(matches!(failure(400, None, body(131_048, 0).as_bytes()), Failure::RateLimited(_)));
        assert!(matches!(failure(502, None, b"bad gateway"), Failure::Uncertain(_)));
        assert!(matches!(failure(400, None, b"<html>"), Failure::Other(_)));
        let wait = failure(429, Some(Duration::from_secs(7)), b"");
        assert!(matches!(wait, Failure::RateLimited(d) if d == Duration::from_secs(7)));
    }

    #[test]
    fn four_buttons_on_whatsapp_become_a_list_and_three_stay_buttons() {
        let buttons =
            |n: usize| (0..n).map(|i| botmesh_traits::Button::new(format!("b{i}"), "B")).collect();
        let three =
            Outbound::new("1", OutboundContent::Buttons { body: "?".into(), buttons: buttons(3) });
        assert_eq!(whatsapp(&three).unwrap()["interactive"]["type"], "button");
        let four =
            Outbound::new("1", OutboundContent::Buttons { body: "?".into(), buttons: buttons(4) });
        assert_eq!(whatsapp(&four).unwrap()["interactive"]["type"], "list");
    }
}
