//! From Meta webhook bodies to botmesh messages and receipts.
//!
//! One body may carry several entries, each several messages (of several users); they come
//! out in the order the body lists them. A message keeps Meta's id (`wamid.…`, `m_…`), unique
//! across chats; the chat is the user's WhatsApp id or page-scoped id.
//!
//! This module reads the body and tells the accounts apart; `whatsapp` reads WhatsApp's
//! changes by their field, `calls` WhatsApp's calls, `messaging` Messenger's and Instagram's
//! events.
//!
//! Only what a user did becomes a message, and only a status Meta names `failed` a failed
//! delivery: the business's own messages echoed back, notices about the account and statuses
//! botmesh does not know are skipped (traced at debug level), never guessed into either.

mod calls;
mod messaging;
mod whatsapp;

use botmesh_traits::{Content, Delivery, Inbound};
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

fn unsupported(kind: &str, raw: &Value) -> Content {
    Content::Unsupported { kind: kind.to_owned(), raw: raw.to_string() }
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
                    // Meta names the field of every change; one without is read as `messages`.
                    let field = change.get("field").and_then(Value::as_str).unwrap_or("messages");
                    let Some(read) = whatsapp::reader(field) else {
                        tracing::debug!(target: "botmesh", provider, field, "a WhatsApp change that carries no message is skipped");
                        continue;
                    };
                    let value = change.get("value").unwrap_or(&Value::Null);
                    let number = value.pointer("/metadata/phone_number_id").and_then(value_id);
                    match ours(number.clone()) {
                        true => read(provider, value, &mut items),
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
                    messaging::event(provider, channel.account(), event, &mut items);
                }
            }
        }
    }
    Ok(items)
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
    fn a_body_of_another_channel_or_no_json_is_refused() {
        assert!(parse(&wa(), "whatsapp", br#"{"object":"page","entry":[]}"#).is_err());
        assert!(parse(&wa(), "whatsapp", b"{").is_err());
        assert!(parse(&wa(), "whatsapp", br#"{"object":"whatsapp_business_account"}"#).is_err());
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
}
