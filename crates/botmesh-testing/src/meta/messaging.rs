//! Messenger and Instagram sends: `POST /{page_id}/messages`, `POST /{ig_user_id}/messages`
//! and `POST /me/messages`, with a `message` or a `sender_action`.

use serde_json::{Value, json};

use super::channel::Channel;
use super::faults::GraphError;
use super::ids;
use super::records::{SentMedia, SentMessage, SentReaction};
use super::state::Shared;

/// The longest text, in characters.
const MAX_TEXT: usize = 2000;

/// The most quick replies a message may carry.
const MAX_QUICK_REPLIES: usize = 13;

const MESSAGING_TYPES: [&str; 3] = ["RESPONSE", "UPDATE", "MESSAGE_TAG"];

const SENDER_ACTIONS: [&str; 5] = ["typing_on", "typing_off", "mark_seen", "react", "unreact"];

const ATTACHMENT_TYPES: [&str; 5] = ["image", "video", "audio", "file", "template"];

fn string<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn required(what: &str) -> GraphError {
    GraphError::invalid_parameter(format!("The parameter {what} is required"))
}

/// `recipient.id`, a string or a number.
pub(super) fn recipient(body: &Value) -> Option<String> {
    match body.get("recipient").and_then(|r| r.get("id"))? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Runs a send on Messenger or Instagram and answers `{"recipient_id", "message_id"}` (a
/// typing indicator or `mark_seen` gets no `message_id`).
pub(super) fn send(shared: &Shared, channel: Channel, body: &Value) -> Result<Value, GraphError> {
    let to = recipient(body).ok_or_else(|| required("recipient"))?;
    let messaging_type = string(body, "messaging_type").map(str::to_owned);
    if let Some(t) = &messaging_type {
        if !MESSAGING_TYPES.contains(&t.as_str()) {
            return Err(GraphError::invalid_parameter(format!(
                "Param messaging_type must be one of {{RESPONSE, UPDATE, MESSAGE_TAG}} - got \"{t}\""
            )));
        }
        if t == "MESSAGE_TAG" && string(body, "tag").is_none() {
            return Err(required("tag"));
        }
    }
    let mut sent = SentMessage {
        channel,
        to: to.clone(),
        message_id: None,
        kind: String::new(),
        text: None,
        reply_to: None,
        media: None,
        reaction: None,
        messaging_type,
        body: body.clone(),
    };
    let gets_id = if let Some(action) = string(body, "sender_action") {
        sender_action(action, body, &mut sent)?
    } else {
        let message =
            body.get("message").filter(|m| m.is_object()).ok_or_else(|| required("message"))?;
        read_message(message, &mut sent)?;
        true
    };
    let mut answer = json!({ "recipient_id": to });
    if gets_id {
        let id = ids::mid();
        answer["message_id"] = json!(id);
        sent.message_id = Some(id);
    }
    shared.update(|inner| inner.sent.push(sent));
    Ok(answer)
}

/// Checks a sender action; says whether its answer carries a message id.
fn sender_action(action: &str, body: &Value, sent: &mut SentMessage) -> Result<bool, GraphError> {
    if !SENDER_ACTIONS.contains(&action) {
        return Err(GraphError::invalid_parameter(format!(
            "Param sender_action must be one of {SENDER_ACTIONS:?} - got \"{action}\""
        )));
    }
    action.clone_into(&mut sent.kind);
    if !matches!(action, "react" | "unreact") {
        return Ok(false);
    }
    let payload = body.get("payload").ok_or_else(|| required("payload"))?;
    let message_id =
        string(payload, "message_id").ok_or_else(|| required("payload[message_id]"))?;
    let emoji = if action == "react" {
        string(payload, "reaction").ok_or_else(|| required("payload[reaction]"))?
    } else {
        ""
    };
    sent.reaction =
        Some(SentReaction { message_id: message_id.to_owned(), emoji: emoji.to_owned() });
    Ok(true)
}

/// Checks a `message` and fills in what the record shows of it.
fn read_message(message: &Value, sent: &mut SentMessage) -> Result<(), GraphError> {
    let text = string(message, "text");
    let attachment = message.get("attachment");
    if text.is_none() && attachment.is_none() {
        return Err(GraphError::invalid_parameter(
            "Must send either message text or an attachment",
        ));
    }
    if let Some(text) = text {
        if text.chars().count() > MAX_TEXT {
            return Err(GraphError::invalid_parameter(format!(
                "Param message[text] must be at most {MAX_TEXT} characters long."
            )));
        }
        sent.text = Some(text.to_owned());
        "text".clone_into(&mut sent.kind);
    }
    if let Some(attachment) = attachment {
        let kind = string(attachment, "type").unwrap_or_default();
        if !ATTACHMENT_TYPES.contains(&kind) {
            return Err(GraphError::invalid_parameter(format!(
                "Param message[attachment][type] must be one of {ATTACHMENT_TYPES:?}"
            )));
        }
        let payload =
            attachment.get("payload").ok_or_else(|| required("message[attachment][payload]"))?;
        kind.clone_into(&mut sent.kind);
        if kind == "template" {
            sent.text = string(payload, "text").map(str::to_owned);
        } else {
            let link = string(payload, "url").map(str::to_owned);
            let id = match payload.get("attachment_id") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            if link.is_none() && id.is_none() {
                return Err(required("message[attachment][payload][url]"));
            }
            sent.media = Some(SentMedia { kind: kind.to_owned(), link, id, filename: None });
        }
    }
    if let Some(replies) = message.get("quick_replies") {
        let n = replies.as_array().map(Vec::len).ok_or_else(|| {
            GraphError::invalid_parameter("Param message[quick_replies] must be an array.")
        })?;
        if n > MAX_QUICK_REPLIES {
            return Err(GraphError::invalid_parameter(format!(
                "param message[quick_replies] must have at most {MAX_QUICK_REPLIES} items"
            )));
        }
    }
    sent.reply_to = message.get("reply_to").and_then(|r| string(r, "mid")).map(str::to_owned);
    Ok(())
}
