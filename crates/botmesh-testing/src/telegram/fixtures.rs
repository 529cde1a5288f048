//! Bot API objects as JSON, shaped the way Telegram sends them and teloxide's `Update`
//! deserializes them: users, chats, messages and their contents.
//!
//! [`TelegramServer`](super::TelegramServer) builds its updates from these; a test uses them
//! to build any other update for [`TelegramServer::user_sends`](super::TelegramServer::user_sends)
//! or to add content to [`TelegramServer::user_sends_message`](super::TelegramServer::user_sends_message).
//!
//! The kind of chat follows from its id, as on Telegram: a positive id is a private chat (with
//! the user of that id), an id below `-1_000_000_000_000` (`-100` followed by ten digits or
//! more) a supergroup, and any other negative id a basic group.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// The lowest supergroup id is just below this: supergroup ids are `-100` and ten digits.
const SUPERGROUP_BELOW: i64 = -1_000_000_000_000;

/// The current time as the Bot API's `date`: seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The chat `type` for a chat id: `"private"`, `"group"` or `"supergroup"`.
pub fn chat_type(chat_id: i64) -> &'static str {
    if chat_id > 0 {
        "private"
    } else if chat_id < SUPERGROUP_BELOW {
        "supergroup"
    } else {
        "group"
    }
}

/// A human user: `{"id", "is_bot": false, "first_name": "User <id>", "username": "user<id>"}`.
pub fn user(user_id: i64) -> Value {
    json!({
        "id": user_id,
        "is_bot": false,
        "first_name": format!("User {user_id}"),
        "username": format!("user{user_id}"),
        "language_code": "en",
    })
}

/// A chat of the [kind its id implies](chat_type): a private chat is named after its user
/// (as [`user`] names them), a group or supergroup is titled `"Group <id>"`.
pub fn chat(chat_id: i64) -> Value {
    match chat_type(chat_id) {
        "private" => json!({
            "id": chat_id,
            "type": "private",
            "first_name": format!("User {chat_id}"),
            "username": format!("user{chat_id}"),
        }),
        kind => json!({ "id": chat_id, "type": kind, "title": format!("Group {chat_id}") }),
    }
}

/// A supergroup with topics enabled (`"is_forum": true`).
pub fn forum_chat(chat_id: i64) -> Value {
    let mut chat = chat(chat_id);
    chat["is_forum"] = Value::Bool(true);
    chat
}

/// A message without content: `message_id`, `date` (now), `chat` and `from`. Add `text`,
/// `photo`, ... to it, or pass it to
/// [`TelegramServer::user_sends`](super::TelegramServer::user_sends) inside
/// `{"message": ...}`.
pub fn message(chat_id: i64, user_id: i64, message_id: i64) -> Value {
    json!({
        "message_id": message_id,
        "date": unix_now(),
        "chat": chat(chat_id),
        "from": user(user_id),
    })
}

/// A text message.
pub fn text_message(chat_id: i64, user_id: i64, message_id: i64, text: &str) -> Value {
    let mut m = message(chat_id, user_id, message_id);
    m["text"] = Value::String(text.to_owned());
    m
}

/// The `file_unique_id` the stand-in pairs with a `file_id`.
pub fn file_unique_id(file_id: &str) -> String {
    format!("u{file_id}")
}

/// A message's `photo`: the sizes Telegram offers of one picture (a thumbnail and the
/// original), all with the same `file_id` here, so that `getFile` on any returns its bytes.
pub fn photo(file_id: &str) -> Value {
    let unique = file_unique_id(file_id);
    json!([
        { "file_id": file_id, "file_unique_id": unique, "width": 90, "height": 90 },
        { "file_id": file_id, "file_unique_id": unique, "width": 800, "height": 800 },
    ])
}

/// A message's `voice`: an OGG/Opus voice note of `duration` seconds.
pub fn voice(file_id: &str, duration: u32) -> Value {
    json!({
        "file_id": file_id,
        "file_unique_id": file_unique_id(file_id),
        "duration": duration,
        "mime_type": "audio/ogg",
    })
}

/// A message's `document`.
pub fn document(file_id: &str, file_name: &str) -> Value {
    json!({
        "file_id": file_id,
        "file_unique_id": file_unique_id(file_id),
        "file_name": file_name,
        "mime_type": "application/octet-stream",
    })
}

/// A message's `location`.
pub fn location(latitude: f64, longitude: f64) -> Value {
    json!({ "latitude": latitude, "longitude": longitude })
}

/// A message's `contact`; `user_id` links it to a Telegram user, if it is one.
pub fn contact(phone_number: &str, first_name: &str, user_id: Option<i64>) -> Value {
    let mut c = json!({ "phone_number": phone_number, "first_name": first_name });
    if let Some(id) = user_id {
        c["user_id"] = json!(id);
    }
    c
}

/// An inline keyboard with one row of callback buttons, `(text, callback_data)` each, as a
/// message's or a send's `reply_markup`.
pub fn inline_keyboard(buttons: &[(&str, &str)]) -> Value {
    let row: Vec<Value> =
        buttons.iter().map(|(text, data)| json!({ "text": text, "callback_data": data })).collect();
    json!({ "inline_keyboard": [row] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_kinds_follow_the_id() {
        assert_eq!(chat_type(42), "private");
        assert_eq!(chat_type(-42), "group");
        assert_eq!(chat_type(-1_001_234_567_890), "supergroup");
        assert_eq!(chat(-42)["title"], "Group -42");
        assert_eq!(chat(42)["first_name"], user(42)["first_name"]);
        assert_eq!(forum_chat(-1_001_234_567_890)["is_forum"], true);
    }
}
