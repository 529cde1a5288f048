//! From Meta webhook bodies to botmesh messages and receipts.
//!
//! One body may carry several entries, each several messages (of several users); they come
//! out in the order the body lists them. A message keeps Meta's id (`wamid.…`, `m_…`), unique
//! across chats; the chat is the user's WhatsApp id or page-scoped id.

use botmesh_traits::{
    ChatId, Contact, Content, Delivery, DeliveryStatus, Inbound, Media, MediaKind, MessageId,
};
use serde_json::Value;

use crate::channel::Channel;

/// What a webhook body carries, in order.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "messages are nearly every item; boxing them would allocate once more per message"
)]
pub(crate) enum Item {
    /// A user's message.
    Message(Inbound),
    /// A receipt for a message the bot sent.
    Delivery(Delivery),
    /// Something for another account of the same app (another page or number): not this
    /// provider's to take.
    Elsewhere(String),
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// Reads a webhook body of `channel`'s; `Err` says why it is not one.
pub(crate) fn parse(channel: &Channel, provider: &str, body: &[u8]) -> Result<Vec<Item>, String> {
    let body: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let object = body.get("object").and_then(Value::as_str).ok_or("no \"object\"")?;
    if object != channel.object() {
        return Err(format!("a {object:?} body at the {:?} endpoint", channel.object()));
    }
    let entries = body.get("entry").and_then(Value::as_array).ok_or("no \"entry\" list")?;
    let mut items = Vec::new();
    let ours = |id: Option<String>| id.is_none_or(|id| id == channel.account());
    for entry in entries {
        match channel {
            Channel::WhatsApp { .. } => {
                for change in array(entry, "changes") {
                    let value = change.get("value").unwrap_or(&Value::Null);
                    let number = value.pointer("/metadata/phone_number_id").and_then(value_id);
                    match ours(number.clone()) {
                        true => whatsapp(provider, value, &mut items),
                        false => items.push(Item::Elsewhere(number.unwrap_or_default())),
                    }
                }
            }
            Channel::Messenger { .. } | Channel::Instagram { .. } => {
                let account = entry.get("id").and_then(value_id);
                if !ours(account.clone()) {
                    items.push(Item::Elsewhere(account.unwrap_or_default()));
                    continue;
                }
                for event in array(entry, "messaging") {
                    messaging(provider, event, &mut items);
                }
            }
        }
    }
    Ok(items)
}

/// One WhatsApp change value: its messages and its statuses.
fn whatsapp(provider: &str, value: &Value, items: &mut Vec<Item>) {
    let name_of = |wa_id: &str| {
        array(value, "contacts")
            .find(|c| c.get("wa_id").and_then(Value::as_str) == Some(wa_id))
            .and_then(|c| c.pointer("/profile/name").and_then(Value::as_str))
            .map(str::to_owned)
    };
    for m in array(value, "messages") {
        let seconds = text(m, "timestamp").and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        let (Some(id), Some(from)) = (text(m, "id"), text(m, "from")) else {
            // Not droppable, not a message the bot can answer: kept whole, under the sender
            // or the account.
            let from = text(m, "from").unwrap_or_else(|| "unknown".to_owned());
            let id = format!("noid:{from}:{seconds}:{}", m.to_string().len());
            items.push(Item::Message(Inbound::new(
                provider,
                id,
                from.as_str(),
                unsupported("message", m),
            )));
            continue;
        };
        let content = whatsapp_content(m);
        let mut inbound =
            Inbound::new(provider, id, from.as_str(), content).at(seconds.saturating_mul(1000));
        if let Some(quoted) = m.pointer("/context/id").and_then(Value::as_str) {
            inbound = inbound.replying_to(quoted);
        }
        if let Some(name) = name_of(&from) {
            inbound = inbound.with_sender_name(name);
        }
        items.push(Item::Message(inbound));
    }
    for s in array(value, "statuses") {
        let (Some(id), Some(to)) = (text(s, "id"), text(s, "recipient_id")) else { continue };
        let status = match s.get("status").and_then(Value::as_str) {
            Some("sent") => DeliveryStatus::Sent,
            Some("delivered") => DeliveryStatus::Delivered,
            Some("read") => DeliveryStatus::Read,
            _ => DeliveryStatus::Failed,
        };
        let mut delivery = Delivery::new(ChatId::from(to), MessageId::from(id), status);
        let seconds = text(s, "timestamp").and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        delivery.timestamp_ms = seconds.saturating_mul(1000);
        items.push(Item::Delivery(delivery));
    }
}

fn file(v: &Value) -> Media {
    let mut media = Media::new(text(v, "id").or_else(|| text(v, "link")).unwrap_or_default());
    if let Some(mime) = text(v, "mime_type") {
        media = media.with_mime(mime);
    }
    if let Some(name) = text(v, "filename") {
        media = media.with_file_name(name);
    }
    media
}

fn whatsapp_content(m: &Value) -> Content {
    let kind = m.get("type").and_then(Value::as_str).unwrap_or_default();
    let part = m.get(kind).unwrap_or(&Value::Null);
    let media = |k| Content::Media { kind: k, media: file(part), caption: text(part, "caption") };
    match kind {
        "text" => Content::text(text(part, "body").unwrap_or_default()),
        "image" => media(MediaKind::Image),
        "video" => media(MediaKind::Video),
        "document" => media(MediaKind::Document),
        "sticker" => media(MediaKind::Sticker),
        "audio" if part.get("voice").and_then(Value::as_bool) == Some(true) => {
            Content::Voice { media: file(part), seconds: None }
        }
        "audio" => media(MediaKind::Audio),
        "location" => Content::Location {
            latitude: part.get("latitude").and_then(Value::as_f64).unwrap_or_default(),
            longitude: part.get("longitude").and_then(Value::as_f64).unwrap_or_default(),
            name: text(part, "name"),
        },
        "contacts" => Content::Contacts { contacts: array(m, "contacts").map(contact).collect() },
        "interactive" => {
            let reply = part.get("button_reply").or_else(|| part.get("list_reply"));
            match reply {
                Some(r) => Content::Button {
                    id: text(r, "id").unwrap_or_default(),
                    title: text(r, "title").unwrap_or_default(),
                },
                None => unsupported(kind, m),
            }
        }
        "button" => Content::Button {
            id: text(part, "payload").unwrap_or_default(),
            title: text(part, "text").unwrap_or_default(),
        },
        "reaction" => Content::Reaction {
            to: MessageId::from(text(part, "message_id").unwrap_or_default()),
            emoji: text(part, "emoji").filter(|e| !e.is_empty()),
        },
        other => unsupported(other, m),
    }
}

fn contact(c: &Value) -> Contact {
    let name = c.pointer("/name/formatted_name").and_then(Value::as_str).unwrap_or_default();
    let mut contact = Contact::new(name);
    for phone in array(c, "phones") {
        if let Some(p) = text(phone, "phone") {
            contact = contact.with_phone(p);
        }
        if let Some(id) = text(phone, "wa_id") {
            contact = contact.with_user_id(id);
        }
    }
    for email in array(c, "emails") {
        if let Some(e) = text(email, "email") {
            contact = contact.with_email(e);
        }
    }
    contact
}

fn unsupported(kind: &str, raw: &Value) -> Content {
    Content::Unsupported { kind: kind.to_owned(), raw: raw.to_string() }
}

/// One Messenger or Instagram messaging event.
fn messaging(provider: &str, e: &Value, items: &mut Vec<Item>) {
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

/// An id Meta sends as a string, or sometimes as a number.
fn value_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wa() -> Channel {
        Channel::WhatsApp { phone_number_id: "p1".into() }
    }

    #[test]
    fn a_batch_of_whatsapp_messages_and_statuses_comes_out_in_order() {
        let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {
            "contacts": [{"wa_id": "34600", "profile": {"name": "Ana"}}],
            "messages": [
                {"from": "34600", "id": "wamid.1", "timestamp": "2", "type": "text", "text": {"body": "hi"}},
                {"from": "34600", "id": "wamid.2", "timestamp": "3", "type": "interactive",
                 "interactive": {"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes"}},
                 "context": {"from": "bot", "id": "wamid.0"}},
                {"from": "34600", "id": "wamid.3", "timestamp": "4", "type": "poll", "poll": {}},
            ],
            "statuses": [{"id": "wamid.9", "recipient_id": "34600", "status": "read", "timestamp": "5"}],
        }}]}]});
        let items = parse(&wa(), "whatsapp", body.to_string().as_bytes()).unwrap();
        assert_eq!(items.len(), 4, "{items:?}");
        let Item::Message(first) = &items[0] else { panic!("{items:?}") };
        assert_eq!((first.id.as_str(), first.chat.as_str()), ("wamid.1", "34600"));
        assert_eq!((first.sender_name.as_deref(), first.timestamp_ms), (Some("Ana"), 2000));
        let Item::Message(press) = &items[1] else { panic!("{items:?}") };
        assert_eq!(press.content, Content::Button { id: "yes".into(), title: "Yes".into() });
        assert_eq!(press.reply_to.as_ref().map(MessageId::as_str), Some("wamid.0"));
        let Item::Message(poll) = &items[2] else { panic!("{items:?}") };
        assert!(matches!(&poll.content, Content::Unsupported { kind, .. } if kind == "poll"));
        let Item::Delivery(read) = &items[3] else { panic!("{items:?}") };
        assert_eq!(read.status, DeliveryStatus::Read);
    }

    #[test]
    fn entries_for_another_account_are_told_apart_and_several_attachments_are_several_messages() {
        let other = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {
            "metadata": {"phone_number_id": "p2"},
            "messages": [{"from": "1", "id": "wamid.x", "timestamp": "1", "type": "text", "text": {"body": "hi"}}],
        }}]}]});
        let items = parse(&wa(), "whatsapp", other.to_string().as_bytes()).unwrap();
        assert!(matches!(&items[..], [Item::Elsewhere(id)] if id == "p2"), "{items:?}");
        let page = Channel::Messenger { page_id: "pg".into() };
        let body = serde_json::json!({"object": "page", "entry": [{"id": "pg", "messaging": [
            {"sender": {"id": "u1"}, "timestamp": 7, "message": {"mid": "m_1", "attachments": [
                {"type": "image", "payload": {"url": "https://scontent.fbcdn.net/a.jpg"}},
                {"type": "image", "payload": {"url": "https://scontent.fbcdn.net/b.jpg"}},
            ]}},
        ]}]});
        let items = parse(&page, "messenger", body.to_string().as_bytes()).unwrap();
        let ids: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Item::Message(m) => Some(m.id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["m_1#0", "m_1#1"]);
    }

    #[test]
    fn a_body_of_another_channel_or_no_json_is_refused() {
        assert!(parse(&wa(), "whatsapp", br#"{"object":"page","entry":[]}"#).is_err());
        assert!(parse(&wa(), "whatsapp", b"{").is_err());
        assert!(parse(&wa(), "whatsapp", br#"{"object":"whatsapp_business_account"}"#).is_err());
    }

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
