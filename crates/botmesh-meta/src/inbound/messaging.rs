//! Messenger's and Instagram's messaging events: the users' messages and the receipts of the
//! bot's.

use botmesh_traits::{Content, Delivery, DeliveryStatus, Inbound, Media, MediaKind, MessageId};
use serde_json::Value;

use super::{Item, array, text, unsupported, value_id};

/// One Messenger or Instagram messaging event.
pub(super) fn event(provider: &str, e: &Value, items: &mut Vec<Item>) {
    let Some(sender) = e.pointer("/sender/id").and_then(value_id) else { return };
    let at = e.get("timestamp").and_then(Value::as_u64).unwrap_or(0);
    if let Some(m) = e.get("message") {
        if m.get("is_echo").and_then(Value::as_bool) == Some(true) {
            return; // The page's own message, echoed back.
        }
        let Some(id) = text(m, "mid") else {
            let id = format!("noid:{sender}:{at}");
            items.push(Item::Message(Inbound::new(
                provider,
                id,
                sender.as_str(),
                unsupported("message", m),
            )));
            return;
        };
        let attachments: Vec<&Value> = array(m, "attachments").collect();
        if text(m, "text").is_none() && m.get("quick_reply").is_none() && attachments.len() > 1 {
            // Several files in one message: one message each, in order.
            for (i, a) in attachments.iter().enumerate() {
                let inbound =
                    Inbound::new(provider, format!("{id}#{i}"), sender.as_str(), attachment(a));
                items.push(Item::Message(inbound.at(at)));
            }
            return;
        }
        let content = if let Some(qr) = m.get("quick_reply") {
            Content::Button {
                id: text(qr, "payload").unwrap_or_default(),
                title: text(m, "text").unwrap_or_default(),
            }
        } else if let Some(body) = text(m, "text") {
            Content::text(body)
        } else if let Some(a) = attachments.first() {
            attachment(a)
        } else {
            unsupported("message", m)
        };
        let mut inbound = Inbound::new(provider, id, sender.as_str(), content).at(at);
        if let Some(quoted) = m.pointer("/reply_to/mid").and_then(Value::as_str) {
            inbound = inbound.replying_to(quoted);
        }
        items.push(Item::Message(inbound));
    } else if let Some(p) = e.get("postback") {
        let id = text(p, "mid").unwrap_or_else(|| format!("postback:{sender}:{at}"));
        let content = Content::Button {
            id: text(p, "payload").unwrap_or_default(),
            title: text(p, "title").unwrap_or_default(),
        };
        items.push(Item::Message(Inbound::new(provider, id, sender.as_str(), content).at(at)));
    } else if let Some(r) = e.get("reaction") {
        let to = MessageId::from(text(r, "mid").unwrap_or_default());
        let emoji = match r.get("action").and_then(Value::as_str) {
            Some("unreact") => None,
            _ => text(r, "emoji"),
        };
        let id = format!("reaction:{sender}:{to}:{at}");
        let content = Content::Reaction { to, emoji };
        items.push(Item::Message(Inbound::new(provider, id, sender.as_str(), content).at(at)));
    } else if let Some(d) = e.get("delivery") {
        for mid in array(d, "mids").filter_map(Value::as_str) {
            let delivery = Delivery::new(sender.as_str(), mid, DeliveryStatus::Delivered);
            items.push(Item::Delivery(delivery));
        }
    } else if e.get("read").is_some() {
        // A read watermark names no message: reported against the chat.
        let delivery = Delivery::new(sender.as_str(), "", DeliveryStatus::Read);
        items.push(Item::Delivery(delivery));
    } else {
        let id = format!("event:{sender}:{at}");
        items.push(Item::Message(Inbound::new(
            provider,
            id,
            sender.as_str(),
            unsupported("event", e),
        )));
    }
}

/// A Messenger or Instagram attachment: a file by URL, or, for what is not a file (a shared
/// post, a location), the attachment kept whole.
fn attachment(a: &Value) -> Content {
    let kind = match a.get("type").and_then(Value::as_str) {
        Some("image") => MediaKind::Image,
        Some("video") => MediaKind::Video,
        Some("audio") => MediaKind::Audio,
        Some("file") => MediaKind::Document,
        other => return unsupported(other.unwrap_or("attachment"), a),
    };
    match a.pointer("/payload/url").and_then(Value::as_str) {
        Some(url) => Content::Media { kind, media: Media::new(url), caption: None },
        None => unsupported("attachment", a),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;
    use crate::channel::Channel;

    #[test]
    fn messenger_quick_replies_are_button_presses_and_echoes_are_dropped() {
        let page = Channel::Messenger { page_id: "pg".into() };
        let body = serde_json::json!({"object": "page", "entry": [{"messaging": [
            {"sender": {"id": "u1"}, "timestamp": 7, "message": {"mid": "m_1", "text": "Large", "quick_reply": {"payload": "L"}}},
            {"sender": {"id": "pg"}, "timestamp": 8, "message": {"mid": "m_2", "text": "hi", "is_echo": true}},
        ]}]});
        let items = parse(&page, "messenger", body.to_string().as_bytes()).unwrap();
        assert_eq!(items.len(), 1);
        let Item::Message(m) = &items[0] else { panic!("{items:?}") };
        assert_eq!(m.content, Content::Button { id: "L".into(), title: "Large".into() });
    }
}
