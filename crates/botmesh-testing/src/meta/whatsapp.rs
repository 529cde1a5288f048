//! WhatsApp sends: `POST /{phone_number_id}/messages`, with the customer service window, and
//! the same endpoint's read receipts (`"status": "read"`).

use serde_json::{Value, json};

use super::channel::Channel;
use super::faults::GraphError;
use super::ids;
use super::records::{SentMedia, SentMessage, SentReaction};
use super::state::Shared;

/// The longest text body, in characters.
const MAX_TEXT: usize = 4096;

/// The message types the Cloud API sends.
const TYPES: [&str; 11] = [
    "text",
    "image",
    "document",
    "audio",
    "video",
    "sticker",
    "location",
    "contacts",
    "interactive",
    "template",
    "reaction",
];

/// A string field, or `None`.
fn string<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn required(what: &str) -> GraphError {
    GraphError::invalid_parameter(format!("The parameter {what} is required."))
}

/// A recipient's `wa_id`: the `to` number's digits (`+34 600-11-22` becomes `346001122`),
/// as WhatsApp normalizes it.
pub(super) fn wa_id(to: &str) -> String {
    to.chars().filter(char::is_ascii_digit).collect()
}

/// Runs a send, or a read receipt, and answers as the Cloud API does.
pub(super) fn send(shared: &Shared, body: &Value) -> Result<Value, GraphError> {
    if string(body, "messaging_product") != Some("whatsapp") {
        return Err(required("messaging_product"));
    }
    if string(body, "status") == Some("read") {
        let id = string(body, "message_id").ok_or_else(|| required("message_id"))?.to_owned();
        shared.update(|inner| inner.marked_read.push(id));
        return Ok(json!({ "success": true }));
    }
    let to = match body.get("to") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(required("to")),
    };
    let wa_id = wa_id(&to);
    if wa_id.is_empty() {
        return Err(GraphError::invalid_parameter(format!("Invalid parameter: to {to:?}")));
    }
    let kind = string(body, "type").unwrap_or("text");
    if !TYPES.contains(&kind) {
        return Err(GraphError::invalid_parameter(format!("Unsupported message type: {kind}")));
    }
    // Every type's content is an object, but `contacts`, an array of contacts.
    let content = body
        .get(kind)
        .filter(|c| if kind == "contacts" { c.is_array() } else { c.is_object() })
        .ok_or_else(|| required(kind))?;
    let mut sent = SentMessage {
        channel: Channel::WhatsApp,
        to: wa_id.clone(),
        message_id: None,
        kind: kind.to_owned(),
        text: None,
        reply_to: body.get("context").and_then(|c| string(c, "message_id")).map(str::to_owned),
        media: None,
        reaction: None,
        messaging_type: None,
        body: body.clone(),
    };
    read_content(shared, kind, content, &mut sent)?;
    let id = ids::wamid();
    sent.message_id = Some(id.clone());
    shared.update(|inner| {
        if kind != "template" && !inner.in_window(&wa_id) {
            return Err(GraphError::re_engagement());
        }
        inner.authors.insert(id.clone(), shared.config.display_phone_number.clone());
        inner.sent.push(sent);
        Ok(())
    })?;
    let mut message = json!({ "id": id });
    if kind == "template" {
        message["message_status"] = json!("accepted");
    }
    Ok(json!({
        "messaging_product": "whatsapp",
        "contacts": [{ "input": to, "wa_id": wa_id }],
        "messages": [message],
    }))
}

/// Checks a type's object and fills in what the record shows of it.
fn read_content(
    shared: &Shared,
    kind: &str,
    content: &Value,
    sent: &mut SentMessage,
) -> Result<(), GraphError> {
    match kind {
        "text" => {
            let text = string(content, "body").ok_or_else(|| required("text['body']"))?;
            if text.chars().count() > MAX_TEXT {
                return Err(GraphError::invalid_parameter(format!(
                    "Param text['body'] must be at most {MAX_TEXT} characters long."
                )));
            }
            sent.text = Some(text.to_owned());
        }
        "image" | "document" | "audio" | "video" | "sticker" => {
            let link = string(content, "link").map(str::to_owned);
            let id = string(content, "id").map(str::to_owned);
            if link.is_none() && id.is_none() {
                return Err(required(&format!("{kind}['link'] or {kind}['id']")));
            }
            if let Some(id) = &id
                && !shared.lock().media.contains_key(id)
            {
                return Err(GraphError::invalid_parameter(format!(
                    "Invalid parameter: {kind}['id'] {id} is not an uploaded media id"
                )));
            }
            sent.text = string(content, "caption").map(str::to_owned);
            sent.media = Some(SentMedia {
                kind: kind.to_owned(),
                link,
                id,
                filename: string(content, "filename").map(str::to_owned),
            });
        }
        "location" => {
            let ok = ["latitude", "longitude"].iter().all(|k| {
                content.get(k).is_some_and(|v| {
                    v.is_number() || v.as_str().is_some_and(|s| s.parse::<f64>().is_ok())
                })
            });
            if !ok {
                return Err(required("location['latitude'] and location['longitude']"));
            }
        }
        "contacts" if content.as_array().is_none_or(Vec::is_empty) => {
            return Err(GraphError::invalid_parameter("Param contacts must not be empty."));
        }
        "interactive" => {
            string(content, "type").ok_or_else(|| required("interactive['type']"))?;
            sent.text = content.get("body").and_then(|b| string(b, "text")).map(str::to_owned);
        }
        "template" => {
            string(content, "name").ok_or_else(|| required("template['name']"))?;
        }
        "reaction" => {
            let message_id =
                string(content, "message_id").ok_or_else(|| required("reaction['message_id']"))?;
            let emoji = string(content, "emoji").unwrap_or_default();
            sent.reaction =
                Some(SentReaction { message_id: message_id.to_owned(), emoji: emoji.to_owned() });
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_wa_ids() {
        assert_eq!(wa_id("+34 600-11-22"), "346001122");
        assert_eq!(wa_id("15551234"), "15551234");
        assert_eq!(wa_id("+"), "");
    }
}
