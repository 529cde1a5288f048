//! The JSON of Discord's objects as the stand-in sends them: users, messages, interactions,
//! reactions, the `READY` payload. Shaped as Discord documents them, with the fields a client
//! library requires.

use serde_json::{Value, json};

/// Discord's epoch (2015-01-01) in milliseconds since the Unix epoch.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A snowflake for the `n`-th object made at `unix_ms`.
pub(crate) fn snowflake(unix_ms: u64, n: u64) -> u64 {
    (unix_ms.saturating_sub(DISCORD_EPOCH_MS) << 22) | (n & 0x3f_ffff)
}

/// A user object: `id` with its username and display name.
pub fn user(id: u64, name: &str, bot: bool) -> Value {
    json!({
        "id": id.to_string(), "username": name, "discriminator": "0", "global_name": name,
        "avatar": null, "bot": bot,
    })
}

/// Who sends a message or presses a button, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Author {
    /// The user's id.
    pub user: u64,
    /// Their username.
    pub name: String,
    /// The guild of the channel, `None` in a DM.
    pub guild: Option<u64>,
}

impl Author {
    /// A user writing in a DM channel.
    pub fn dm(user: u64, name: impl Into<String>) -> Self {
        Self { user, name: name.into(), guild: None }
    }

    /// A user writing in a channel of guild `guild`.
    pub fn in_guild(user: u64, name: impl Into<String>, guild: u64) -> Self {
        Self { user, name: name.into(), guild: Some(guild) }
    }
}

/// A message object, as `MESSAGE_CREATE` carries it and `POST /channels/{id}/messages`
/// answers it.
pub(crate) fn message(
    id: u64,
    channel: u64,
    author: &Value,
    guild: Option<u64>,
    content: &str,
) -> Value {
    let mut m = json!({
        "id": id.to_string(), "channel_id": channel.to_string(), "author": author,
        "content": content, "timestamp": timestamp(id), "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0, "components": [],
    });
    if let Some(guild) = guild {
        m["guild_id"] = json!(guild.to_string());
    }
    m
}

/// An attachment object for a file the stand-in serves at `url`.
pub(crate) fn attachment(id: u64, file_name: &str, mime: &str, size: usize, url: &str) -> Value {
    json!({
        "id": id.to_string(), "filename": file_name, "size": size, "url": url,
        "proxy_url": url, "content_type": mime,
    })
}

/// The ISO 8601 time a snowflake was made at, as Discord writes message timestamps.
pub(crate) fn timestamp(snowflake: u64) -> String {
    let ms = (snowflake >> 22) + DISCORD_EPOCH_MS;
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (y, mo, d) = civil(i64::try_from(days).unwrap_or(0));
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{millis:03}000+00:00")
}

/// Days since 1970-01-01 as a calendar date (Howard Hinnant's `civil_from_days`).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (era * 400 + yoe + i64::from(m <= 2), m, d)
}

/// The fields every interaction object has.
fn interaction(id: u64, kind: u8, channel: u64, author: &Author, app: u64, token: &str) -> Value {
    let mut i = json!({
        "id": id.to_string(), "application_id": app.to_string(), "type": kind,
        "channel_id": channel.to_string(), "user": user(author.user, &author.name, false),
        "token": token, "version": 1, "locale": "en-US", "entitlements": [],
        "attachment_size_limit": 26_214_400,
    });
    if let Some(guild) = author.guild {
        i["guild_id"] = json!(guild.to_string());
        i["guild_locale"] = json!("en-US");
    }
    i
}

/// A button press (`type` 3, component type 2) on `message`.
pub(crate) fn button_press(
    id: u64,
    app: u64,
    token: &str,
    author: &Author,
    message: &Value,
    custom_id: &str,
) -> Value {
    let channel = message["channel_id"].as_str().and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut i = interaction(id, 3, channel, author, app, token);
    i["message"] = message.clone();
    i["data"] = json!({"custom_id": custom_id, "component_type": 2});
    i
}

/// A slash command (`type` 2, chat input) with string options, in order.
pub(crate) fn slash_command(
    id: u64,
    app: u64,
    token: &str,
    author: &Author,
    channel: u64,
    name: &str,
    options: &[(&str, &str)],
) -> Value {
    let mut i = interaction(id, 2, channel, author, app, token);
    let options: Vec<Value> =
        options.iter().map(|(n, v)| json!({"name": n, "type": 3, "value": v})).collect();
    i["data"] = json!({"id": (id + 1).to_string(), "name": name, "type": 1, "options": options});
    i
}

/// A reaction added to (or removed from) a message.
pub(crate) fn reaction(channel: u64, message: u64, author: &Author, emoji: &str) -> Value {
    let mut r = json!({
        "user_id": author.user.to_string(), "channel_id": channel.to_string(),
        "message_id": message.to_string(), "emoji": {"id": null, "name": emoji},
        "burst": false, "type": 0,
    });
    if let Some(guild) = author.guild {
        r["guild_id"] = json!(guild.to_string());
    }
    r
}

/// The `READY` payload for a new session of bot `bot`.
pub(crate) fn ready(bot: &Value, app: u64, session_id: &str, resume_url: &str) -> Value {
    json!({
        "v": 10, "user": bot, "guilds": [], "session_id": session_id,
        "resume_gateway_url": resume_url, "shard": [0, 1],
        "application": {"id": app.to_string(), "flags": 0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_back_from_snowflakes() {
        // 2021-01-01T00:00:00.000Z
        let id = snowflake(1_609_459_200_000, 7);
        assert_eq!(timestamp(id), "2021-01-01T00:00:00.000000+00:00");
        assert_eq!(id & 0x3f_ffff, 7);
    }
}
