//! Messenger's and Instagram's messaging events: the users' messages and the receipts of the
//! bot's.

use botmesh_traits::{Content, Delivery, DeliveryStatus, Inbound, Media, MediaKind, MessageId};
use serde_json::Value;

use super::{Item, array, text, unsupported, value_id};

/// One Messenger or Instagram messaging event of `account` (the page or Instagram account).
pub(super) fn event(provider: &str, account: &str, e: &Value, items: &mut Vec<Item>) {
    let Some(sender) = e.pointer("/sender/id").and_then(value_id) else { return };
    if sender == account {
        // The account's own doing (a message it sent, echoed back): no user's.
        return;
    }
    let at = e.get("timestamp").and_then(Value::as_u64).unwrap_or(0);
    if let Some(m) = e.get("message") {
        if m.get("is_echo").and_then(Value::as_bool) == Some(true) {
            return; // The page's own message, echoed back.
        }
        if m.get("is_deleted").and_then(Value::as_bool) == Some(true) {
            // The user took a message back: not that message again, so an id of its own.
            let mid = text(m, "mid").unwrap_or_else(|| format!("noid:{sender}:{at}"));
            let content = unsupported("message_deleted", m);
            let id = format!("{mid}:deleted");
            items.push(Item::Message(Inbound::new(provider, id, sender.as_str(), content).at(at)));
            return;
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
    } else if let Some(r) = e.get("read") {
        // Instagram names the message read; Messenger's watermark names none, so its read is
        // reported against the chat.
        let mid = text(r, "mid").unwrap_or_default();
        let delivery = Delivery::new(sender.as_str(), mid, DeliveryStatus::Read);
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

    #[test]
    fn the_account_s_own_events_are_no_user_s_and_an_instagram_read_names_its_message() {
        let ig = Channel::Instagram { account_id: "ig".into() };
        let body = serde_json::json!({"object": "instagram", "entry": [{"id": "ig", "messaging": [
            {"sender": {"id": "ig"}, "recipient": {"id": "u1"}, "timestamp": 1, "message": {"mid": "m_e", "text": "hi", "is_echo": true}},
            {"sender": {"id": "ig"}, "recipient": {"id": "u1"}, "timestamp": 2, "reaction": {"mid": "m_u", "action": "react", "emoji": "x"}},
            {"sender": {"id": "ig"}, "recipient": {"id": "u1"}, "timestamp": 3, "read": {"mid": "m_u"}},
            {"sender": {"id": "u1"}, "recipient": {"id": "ig"}, "timestamp": 4, "read": {"mid": "m_sent"}},
            {"sender": {"id": "u1"}, "recipient": {"id": "ig"}, "timestamp": 5, "message": {"mid": "m_gone", "is_deleted": true}},
        ]}]});
        let items = parse(&ig, "instagram", body.to_string().as_bytes()).unwrap();
        let [Item::Delivery(read), Item::Message(gone)] = &items[..] else { panic!("{items:?}") };
        assert_eq!((read.message.as_str(), read.status), ("m_sent", DeliveryStatus::Read));
        assert_eq!((gone.chat.as_str(), gone.id.as_str()), ("u1", "m_gone:deleted"));
        assert!(
            matches!(&gone.content, Content::Unsupported { kind, .. } if kind == "message_deleted")
        );
    }
}
