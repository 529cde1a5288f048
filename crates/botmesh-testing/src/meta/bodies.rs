//! Webhook bodies: [`Inbound`] items rendered in each channel's shape, one body per batch.
//!
//! - WhatsApp: `{"object": "whatsapp_business_account", "entry": [{"id": <waba id>,
//!   "changes": [...]}]}`, one entry, one change (`"field": "messages"`) per item, each
//!   change's `value` carrying one message (with `metadata` and `contacts`) or one status.
//! - Messenger and Instagram: `{"object": "page" | "instagram", "entry": [...]}`, one entry per
//!   item (`id` the page or Instagram account, `time`), each with a `messaging` array of one
//!   item, as Meta sends them.

use serde_json::{Map, Value, json};

use super::channel::Channel;
use super::ids;
use super::inbound::{Inbound, Kind, MessageStatus};
use super::state::{Config, Inner};

/// What rendering needs besides the items: the business's ids, where media are served, and
/// the state (media metadata, who sent a quoted message).
pub(super) struct Context<'a> {
    pub(super) config: &'a Config,
    pub(super) base_url: &'a str,
    pub(super) inner: &'a Inner,
}

/// One body for items of one channel.
pub(super) fn render(cx: &Context<'_>, channel: Channel, items: &[&Inbound]) -> Value {
    match channel {
        Channel::WhatsApp => whatsapp_body(cx, items),
        Channel::Messenger | Channel::Instagram => messaging_body(cx, channel, items),
    }
}

fn whatsapp_body(cx: &Context<'_>, items: &[&Inbound]) -> Value {
    let changes: Vec<Value> = items
        .iter()
        .map(|item| json!({ "field": "messages", "value": whatsapp_value(cx, item) }))
        .collect();
    json!({
        "object": Channel::WhatsApp.object(),
        "entry": [{ "id": cx.config.waba_id, "changes": changes }],
    })
}

fn whatsapp_value(cx: &Context<'_>, item: &Inbound) -> Value {
    let mut value = json!({
        "messaging_product": "whatsapp",
        "metadata": {
            "display_phone_number": cx.config.display_phone_number,
            "phone_number_id": cx.config.phone_number_id,
        },
    });
    if let Kind::Status(status) = &item.kind {
        value["statuses"] = json!([whatsapp_status(item, status)]);
        return value;
    }
    let name = item.profile_name.clone().unwrap_or_else(|| format!("User {}", item.user));
    value["contacts"] = json!([{ "profile": { "name": name }, "wa_id": item.user }]);
    value["messages"] = json!([whatsapp_message(cx, item)]);
    value
}

fn whatsapp_status(item: &Inbound, status: &MessageStatus) -> Value {
    let mut s = json!({
        "id": item.id,
        "status": status.as_str(),
        "timestamp": ids::unix_secs().to_string(),
        "recipient_id": item.user,
    });
    if let MessageStatus::Failed { code, title } = status {
        s["errors"] = json!([{
            "code": code,
            "title": title,
            "message": title,
            "error_data": { "details": title },
        }]);
    }
    s
}

fn whatsapp_message(cx: &Context<'_>, item: &Inbound) -> Value {
    let mut m = json!({
        "from": item.user,
        "id": item.id,
        "timestamp": ids::unix_secs().to_string(),
    });
    let content = match &item.kind {
        Kind::Text(text) => json!({ "type": "text", "text": { "body": text } }),
        Kind::Media { kind, media_id, caption } => {
            let mut media = json!({ "id": media_id });
            match cx.inner.media.get(media_id) {
                Some(stored) => {
                    media["mime_type"] = json!(stored.mime_type);
                    media["sha256"] = json!(stored.sha256);
                }
                None => media["mime_type"] = json!("application/octet-stream"),
            }
            if let Some(caption) = caption {
                media["caption"] = json!(caption);
            }
            if kind == "document" {
                media["filename"] = json!(format!("file_{media_id}"));
            }
            if kind == "voice" {
                // Voice notes come as audio with `voice: true`.
                media["voice"] = json!(true);
                json!({ "type": "audio", "audio": media })
            } else {
                let mut content = json!({ "type": kind });
                content[kind.as_str()] = media;
                content
            }
        }
        Kind::Reaction { message_id, emoji } => {
            json!({ "type": "reaction", "reaction": { "message_id": message_id, "emoji": emoji } })
        }
        Kind::Button { payload, title } => json!({
            "type": "interactive",
            "interactive": {
                "type": "button_reply",
                "button_reply": { "id": payload, "title": title },
            },
        }),
        Kind::QuickReply { payload, text } => {
            json!({ "type": "button", "button": { "payload": payload, "text": text } })
        }
        Kind::ListReply { id, title, description } => json!({
            "type": "interactive",
            "interactive": {
                "type": "list_reply",
                "list_reply": { "id": id, "title": title, "description": description },
            },
        }),
        Kind::Location { latitude, longitude } => {
            let location = json!({ "latitude": latitude, "longitude": longitude });
            json!({ "type": "location", "location": location })
        }
        Kind::WhatsApp(fields) => Value::Object(fields.clone()),
        // Not WhatsApp's: the constructors never put these on WhatsApp.
        Kind::Status(_) | Kind::Delivered { .. } | Kind::Read { .. } | Kind::Messaging(_) => {
            json!({})
        }
    };
    if let Some(quoted) = &item.reply_to {
        let from = cx
            .inner
            .authors
            .get(quoted)
            .cloned()
            .unwrap_or_else(|| cx.config.display_phone_number.clone());
        m["context"] = json!({ "from": from, "id": quoted });
    }
    merge(&mut m, content);
    m
}

fn messaging_body(cx: &Context<'_>, channel: Channel, items: &[&Inbound]) -> Value {
    let account =
        if channel == Channel::Instagram { &cx.config.instagram_id } else { &cx.config.page_id };
    let entries: Vec<Value> = items
        .iter()
        .map(|item| {
            json!({
                "id": account,
                "time": ids::unix_millis(),
                "messaging": [messaging_item(cx, account, item)],
            })
        })
        .collect();
    json!({ "object": channel.object(), "entry": entries })
}

fn messaging_item(cx: &Context<'_>, account: &str, item: &Inbound) -> Value {
    let mut m = json!({
        "sender": { "id": item.user },
        "recipient": { "id": account },
        "timestamp": ids::unix_millis(),
    });
    let message = |mut message: Value| {
        message["mid"] = json!(item.id);
        if let Some(quoted) = &item.reply_to {
            message["reply_to"] = json!({ "mid": quoted });
        }
        json!({ "message": message })
    };
    let content = match &item.kind {
        Kind::Text(text) => message(json!({ "text": text })),
        Kind::Media { kind, media_id, caption } => {
            let kind = match kind.as_str() {
                "document" => "file",
                "sticker" => "image",
                "voice" => "audio",
                other => other,
            };
            let url = format!("{}/cdn/{media_id}", cx.base_url);
            let mut m = json!({ "attachments": [{ "type": kind, "payload": { "url": url } }] });
            if let Some(caption) = caption {
                m["text"] = json!(caption);
            }
            message(m)
        }
        Kind::QuickReply { payload, text } => {
            message(json!({ "text": text, "quick_reply": { "payload": payload } }))
        }
        Kind::Reaction { message_id, emoji } => {
            let mut r = json!({ "mid": message_id });
            if emoji.is_empty() {
                r["action"] = json!("unreact");
            } else {
                r["action"] = json!("react");
                r["emoji"] = json!(emoji);
                r["reaction"] = json!("other");
            }
            json!({ "reaction": r })
        }
        Kind::Button { payload, title } => {
            json!({ "postback": { "mid": item.id, "title": title, "payload": payload } })
        }
        Kind::Delivered { mids } => {
            json!({ "delivery": { "mids": mids, "watermark": ids::unix_millis() } })
        }
        Kind::Read { watermark } => json!({ "read": { "watermark": watermark } }),
        Kind::Messaging(fields) => Value::Object(fields.clone()),
        // WhatsApp's own: the constructors never put these on Messenger or Instagram.
        Kind::ListReply { .. } | Kind::Location { .. } | Kind::Status(_) | Kind::WhatsApp(_) => {
            json!({})
        }
    };
    merge(&mut m, content);
    m
}

/// Adds `fields`' entries to `target`, replacing those it has.
fn merge(target: &mut Value, fields: Value) {
    if let (Some(target), Value::Object(fields)) = (target.as_object_mut(), fields) {
        let fields: Map<String, Value> = fields;
        target.extend(fields);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config() -> Config {
        Config {
            app_secret: "s".to_owned(),
            verify_token: "v".to_owned(),
            access_token: None,
            api_version: "v21.0".to_owned(),
            waba_id: "waba".to_owned(),
            phone_number_id: "phone".to_owned(),
            display_phone_number: "15550001111".to_owned(),
            page_id: "page".to_owned(),
            instagram_id: "ig".to_owned(),
            retry_first: Duration::from_millis(1),
            retry_max: Duration::from_millis(1),
        }
    }

    #[test]
    fn whatsapp_items_are_changes_of_one_entry() {
        let config = config();
        let mut inner = Inner::default();
        let media = inner.store_media(b"png".to_vec(), "image/png");
        inner.authors.insert("wamid.BOT".to_owned(), "15550001111".to_owned());
        let cx = Context { config: &config, base_url: "http://x", inner: &inner };
        let text =
            Inbound::reply(Channel::WhatsApp, "34600", "wamid.BOT", "hi").profile_name("Ana");
        let image = Inbound::media(Channel::WhatsApp, "34600", "image", &media, Some("look"));
        let status = Inbound::status("34611", "wamid.OUT", MessageStatus::Read);
        let body = render(&cx, Channel::WhatsApp, &[&text, &image, &status]);
        assert_eq!(body["object"], "whatsapp_business_account");
        assert_eq!(body["entry"][0]["id"], "waba");
        let changes = body["entry"][0]["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 3);
        let v = &changes[0]["value"];
        assert_eq!(changes[0]["field"], "messages");
        assert_eq!(v["metadata"]["phone_number_id"], "phone");
        assert_eq!(v["contacts"][0], json!({"profile": {"name": "Ana"}, "wa_id": "34600"}));
        let m = &v["messages"][0];
        assert_eq!(
            (&m["type"], &m["text"]["body"], &m["id"]),
            (&json!("text"), &json!("hi"), &json!(text.id()))
        );
        assert_eq!(m["context"], json!({"from": "15550001111", "id": "wamid.BOT"}));
        assert!(m["timestamp"].as_str().unwrap().parse::<u64>().is_ok());
        let i = &changes[1]["value"]["messages"][0]["image"];
        assert_eq!(
            (&i["id"], &i["mime_type"], &i["caption"]),
            (&json!(media), &json!("image/png"), &json!("look"))
        );
        assert_eq!(i["sha256"].as_str().unwrap().len(), 64);
        let s = &changes[2]["value"]["statuses"][0];
        assert_eq!(
            (&s["id"], &s["status"], &s["recipient_id"]),
            (&json!("wamid.OUT"), &json!("read"), &json!("34611"))
        );
        assert!(changes[2]["value"].get("messages").is_none());
    }

    #[test]
    fn messaging_items_are_entries_of_one_item() {
        let config = config();
        let inner = Inner::default();
        let cx = Context { config: &config, base_url: "http://x", inner: &inner };
        let text = Inbound::text(Channel::Instagram, "u1", "hi").in_reply_to("m_1");
        let press = Inbound::button(Channel::Instagram, "u2", "BUY", "Buy");
        let react = Inbound::reaction(Channel::Instagram, "u1", "m_2", "");
        let body = render(&cx, Channel::Instagram, &[&text, &press, &react]);
        assert_eq!(body["object"], "instagram");
        let entries = body["entry"].as_array().unwrap();
        assert_eq!(entries.len(), 3);
        assert!(
            entries
                .iter()
                .all(|e| e["id"] == "ig" && e["messaging"].as_array().unwrap().len() == 1)
        );
        let m = &entries[0]["messaging"][0];
        assert_eq!((&m["sender"]["id"], &m["recipient"]["id"]), (&json!("u1"), &json!("ig")));
        assert_eq!(
            m["message"],
            json!({"mid": text.id(), "text": "hi", "reply_to": {"mid": "m_1"}})
        );
        assert_eq!(
            entries[1]["messaging"][0]["postback"],
            json!({"mid": press.id(), "title": "Buy", "payload": "BUY"})
        );
        assert_eq!(
            entries[2]["messaging"][0]["reaction"],
            json!({"mid": "m_2", "action": "unreact"})
        );
    }
}
