//! WhatsApp's webhook changes, told apart by their field: the users' messages and the
//! statuses of the bot's (calls are read in `calls`).

use botmesh_traits::{
    ChatId, Contact, Content, Delivery, DeliveryStatus, Inbound, Media, MediaKind, MessageId,
};
use serde_json::Value;

use super::{Item, array, calls, text, unsupported};

/// How the value of a WhatsApp change is read.
pub(super) type ReadChange = fn(&str, &Value, &mut Vec<Item>);

/// What a WhatsApp change is to the bot, by its `field`; `None` for a change that carries no
/// message of a user's:
///
/// - `messages`: the users' messages, and the statuses of the messages the bot sent;
/// - `calls`: a user's calls and the statuses of calls (ringing, accepted, rejected): neither
///   a message botmesh maps nor the delivery of one, so `Content::Unsupported` in the user's
///   chat, like anything else a user does that botmesh does not map;
/// - `smb_message_echoes` and `message_echoes`: messages the business sent itself, from the
///   WhatsApp Business app or a linked device: never a user's, skipped;
/// - `history` and `smb_app_state_sync`: the chats and contacts the Business app had when its
///   number came to the Cloud API: answered back then or not at all, skipped;
/// - every other field (template status, quality and category updates, account, phone number
///   and capability updates, alerts, security notices, user preferences, flows, payments, and
///   those Meta adds later): about the account, no message in a chat, skipped.
pub(super) fn reader(field: &str) -> Option<ReadChange> {
    match field {
        "messages" => Some(messages),
        "calls" => Some(calls::change),
        _ => None,
    }
}

/// The profile name the change's `contacts` give `wa_id`.
pub(super) fn profile_name(value: &Value, wa_id: &str) -> Option<String> {
    array(value, "contacts")
        .find(|c| c.get("wa_id").and_then(Value::as_str) == Some(wa_id))
        .and_then(|c| c.pointer("/profile/name").and_then(Value::as_str))
        .map(str::to_owned)
}

/// A timestamp WhatsApp sends as text, in seconds, as milliseconds (0 when there is none).
pub(super) fn seconds_ms(v: &Value) -> u64 {
    text(v, "timestamp").and_then(|t| t.parse::<u64>().ok()).unwrap_or(0).saturating_mul(1000)
}

/// One WhatsApp `messages` change: its messages and its statuses.
fn messages(provider: &str, value: &Value, items: &mut Vec<Item>) {
    let name_of = |wa_id: &str| profile_name(value, wa_id);
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
        if s.get("type").and_then(Value::as_str) == Some("call") {
            // A call's status, wherever it comes: never a message's delivery.
            calls::status(provider, s, items);
            continue;
        }
        let (Some(id), Some(to)) = (text(s, "id"), text(s, "recipient_id")) else { continue };
        let status = match s.get("status").and_then(Value::as_str) {
            Some("sent") => DeliveryStatus::Sent,
            Some("delivered") => DeliveryStatus::Delivered,
            // `played`: the user played a voice note, which they had read.
            Some("read" | "played") => DeliveryStatus::Read,
            Some("failed") => DeliveryStatus::Failed,
            other => {
                // Not a failure botmesh knows of, nor a message: skipped.
                let status = other.unwrap_or_default();
                tracing::debug!(target: "botmesh", provider, message_id = id, status, "a WhatsApp status botmesh does not know is skipped");
                continue;
            }
        };
        let mut delivery = Delivery::new(ChatId::from(to), MessageId::from(id), status);
        delivery.timestamp_ms = seconds_ms(s);
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

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;
    use crate::channel::Channel;

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

    fn receipts(items: &[Item]) -> Vec<(&str, DeliveryStatus)> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Delivery(d) => Some((d.message.as_str(), d.status)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_a_failed_status_is_a_failure_and_a_played_voice_note_is_read() {
        let status = |id: &str, status: &str| serde_json::json!({"id": id, "status": status, "timestamp": "1", "recipient_id": "34600"});
        let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages", "value": {
            "statuses": [
                status("w.sent", "sent"), status("w.delivered", "delivered"), status("w.read", "read"),
                status("w.played", "played"), status("w.new", "a_status_of_tomorrow"),
                {"id": "w.failed", "status": "failed", "timestamp": "1", "recipient_id": "34600",
                 "errors": [{"code": 131026, "title": "Message Undeliverable"}]},
            ],
        }}]}]});
        let items = parse(&wa(), "whatsapp", body.to_string().as_bytes()).unwrap();
        let expected = [
            ("w.sent", DeliveryStatus::Sent),
            ("w.delivered", DeliveryStatus::Delivered),
            ("w.read", DeliveryStatus::Read),
            ("w.played", DeliveryStatus::Read),
            ("w.failed", DeliveryStatus::Failed),
        ];
        assert_eq!(receipts(&items), expected);
        assert_eq!(items.len(), 5, "a status unknown yet is skipped: {items:?}");
    }

    #[test]
    fn echoes_history_and_account_fields_are_no_messages_and_a_call_s_status_is_no_delivery() {
        let echo = serde_json::json!({"from": "15550001111", "to": "34600", "id": "wamid.e", "timestamp": "1",
            "type": "text", "text": {"body": "from the app"}});
        let change =
            |field: &str, value: Value| serde_json::json!({"field": field, "value": value});
        let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [
            change("smb_message_echoes", serde_json::json!({"message_echoes": [echo.clone()]})),
            // Were an echo ever to come under `messages` in its field, it is still not read.
            change("message_echoes", serde_json::json!({"message_echoes": [echo.clone()], "messages": [echo]})),
            change("history", serde_json::json!({"history": [{"threads": [{"id": "34600", "messages": [
                {"from": "34600", "id": "wamid.h", "timestamp": "1", "type": "text", "text": {"body": "old"}}]}]}]})),
            change("account_update", serde_json::json!({"event": "VERIFIED_ACCOUNT"})),
            change("message_template_status_update", serde_json::json!({"event": "APPROVED", "statuses": [{"id": "x"}]})),
            change("a_field_of_tomorrow", serde_json::json!({"statuses": [{"id": "w.x", "recipient_id": "1", "status": "odd"}]})),
            // A call's status under `messages` is still a call's.
            change("messages", serde_json::json!({"statuses": [
                {"id": "wacid.9", "type": "call", "status": "RINGING", "timestamp": "2", "recipient_id": "34600"}]})),
        ]}]});
        let items = parse(&wa(), "whatsapp", body.to_string().as_bytes()).unwrap();
        assert!(receipts(&items).is_empty(), "{items:?}");
        let [Item::Message(call)] = &items[..] else { panic!("{items:?}") };
        assert!(
            matches!(&call.content, Content::Unsupported { kind, .. } if kind == "call_status")
        );
    }
}
