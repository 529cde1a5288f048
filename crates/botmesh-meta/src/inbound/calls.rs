//! WhatsApp's calls: a user's call starting or ending, and the statuses of calls (ringing,
//! accepted, rejected). None is a message botmesh maps or the delivery of one: each comes as
//! a `Content::Unsupported` in the user's chat (kind `call` or `call_status`), under the call's
//! id and its event or status, so that a body Meta delivers again is a duplicate.

use botmesh_traits::Inbound;
use serde_json::Value;

use super::whatsapp::{profile_name, seconds_ms};
use super::{Item, array, text, unsupported};

/// One WhatsApp `calls` change: its calls, then the statuses of calls.
pub(super) fn change(provider: &str, value: &Value, items: &mut Vec<Item>) {
    for c in array(value, "calls") {
        // The user is the callee of the business's calls and the caller of the others.
        let user = match c.get("direction").and_then(Value::as_str) {
            Some("BUSINESS_INITIATED") => text(c, "to"),
            _ => text(c, "from"),
        };
        let (Some(id), Some(user)) = (text(c, "id"), user) else { continue };
        let event = c.get("event").and_then(Value::as_str).unwrap_or("call");
        let content = unsupported("call", c);
        let call = Inbound::new(provider, format!("{id}:{event}"), user.as_str(), content);
        let mut call = call.at(seconds_ms(c));
        if let Some(name) = profile_name(value, &user) {
            call = call.with_sender_name(name);
        }
        items.push(Item::Message(call));
    }
    for s in array(value, "statuses") {
        status(provider, s, items);
    }
}

/// The status of a WhatsApp call (`RINGING`, `ACCEPTED`, `REJECTED`, ...), in the chat of the
/// user called.
pub(super) fn status(provider: &str, s: &Value, items: &mut Vec<Item>) {
    let (Some(id), Some(user)) = (text(s, "id"), text(s, "recipient_id")) else { return };
    let status = s.get("status").and_then(Value::as_str).unwrap_or("status").to_lowercase();
    let content = unsupported("call_status", s);
    let inbound = Inbound::new(provider, format!("{id}:{status}"), user.as_str(), content);
    items.push(Item::Message(inbound.at(seconds_ms(s))));
}

#[cfg(test)]
mod tests {
    use botmesh_traits::Content;

    use super::super::parse;
    use super::*;
    use crate::channel::Channel;

    #[test]
    fn calls_and_their_statuses_are_unsupported_messages_never_deliveries() {
        let body = serde_json::json!({"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "calls", "value": {
            "metadata": {"phone_number_id": "p1", "display_phone_number": "15550001111"},
            "contacts": [{"wa_id": "34600", "profile": {"name": "Ana"}}],
            "statuses": [
                {"id": "wacid.1", "type": "call", "status": "RINGING", "timestamp": "2", "recipient_id": "34601"},
                {"id": "wacid.1", "type": "call", "status": "REJECTED", "timestamp": "3", "recipient_id": "34601"},
            ],
            "calls": [
                {"id": "wacid.2", "from": "34600", "to": "15550001111", "event": "connect", "timestamp": "4", "direction": "USER_INITIATED"},
                {"id": "wacid.3", "from": "15550001111", "to": "34602", "event": "terminate", "timestamp": "5",
                 "direction": "BUSINESS_INITIATED", "status": "FAILED"},
            ],
        }}]}]});
        let channel = Channel::WhatsApp { phone_number_id: "p1".into() };
        let items = parse(&channel, "whatsapp", body.to_string().as_bytes()).unwrap();
        let seen: Vec<(&str, &str, &str)> = items
            .iter()
            .map(|i| match i {
                Item::Message(Inbound {
                    chat,
                    id,
                    content: Content::Unsupported { kind, .. },
                    ..
                }) => (chat.as_str(), id.as_str(), kind.as_str()),
                other => panic!("neither a delivery nor a message botmesh maps: {other:?}"),
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("34600", "wacid.2:connect", "call"),
                ("34602", "wacid.3:terminate", "call"),
                ("34601", "wacid.1:ringing", "call_status"),
                ("34601", "wacid.1:rejected", "call_status"),
            ],
            "each in the user's chat, under an id of its own"
        );
        let Item::Message(connect) = &items[0] else { panic!("{items:?}") };
        assert_eq!((connect.sender_name.as_deref(), connect.timestamp_ms), (Some("Ana"), 4000));
    }
}
