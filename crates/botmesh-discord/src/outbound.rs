//! botmesh messages as Discord messages, and sending them.
//!
//! Text goes out as `content`, buttons as action rows of five, a reply as a message
//! reference, media by URL (an image as an embed, anything else as its link) or uploaded from
//! bytes, a location as a map link, and a reaction as the bot's own reaction. A send's
//! idempotency key becomes an enforced nonce, so Discord creates the message once even when
//! it is sent twice.

use botmesh_traits::{
    Error, MediaKind, MediaSource, MessageId, Outbound, OutboundContent, Result, SendReceipt,
};
use serenity::builder::{
    CreateActionRow, CreateAttachment, CreateButton, CreateEmbed, CreateMessage,
};
use serenity::http::{LightMethod, Multipart, MultipartUpload, Request, Route};
use serenity::model::application::ButtonStyle;
use serenity::model::channel::{MessageReference, ReactionType};
use serenity::model::id::{ChannelId, MessageId as DiscordMessageId};
use serenity::model::prelude::Nonce;

use crate::errors::{Refusal, typed};
use crate::state::Inner;

/// Discord's limits on buttons: five to a row, five rows.
const ROW: usize = 5;
const ROWS: usize = 5;

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidInput { reason: reason.into() }
}

/// A Discord id from botmesh's text form of it.
pub(crate) fn snowflake(text: &str, what: &str) -> Result<u64> {
    text.parse::<u64>()
        .ok()
        .filter(|id| *id != 0)
        .ok_or_else(|| invalid(format!("{what} {text:?} is not a Discord id")))
}

/// A nonce of at most 25 characters that is the same for the same key on every replica
/// (64-bit FNV-1a, in hex).
pub(crate) fn nonce_of(key: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("bm{hash:016x}")
}

/// The message to create for `message`, and the files to upload with it.
pub(crate) fn build(message: &Outbound) -> Result<(CreateMessage, Vec<CreateAttachment>)> {
    let mut files = Vec::new();
    let mut builder = match &message.content {
        OutboundContent::Text { body } => CreateMessage::new().content(body.clone()),
        OutboundContent::Buttons { body, buttons } => {
            if buttons.len() > ROW * ROWS {
                return Err(invalid(format!("discord shows at most {} buttons", ROW * ROWS)));
            }
            let rows = buttons
                .chunks(ROW)
                .map(|row| {
                    let row = row.iter().map(|b| {
                        CreateButton::new(b.id.clone())
                            .label(b.title.clone())
                            .style(ButtonStyle::Primary)
                    });
                    CreateActionRow::Buttons(row.collect())
                })
                .collect();
            CreateMessage::new().content(body.clone()).components(rows)
        }
        OutboundContent::Media { kind, source, caption } => {
            let caption = caption.clone().unwrap_or_default();
            match source {
                MediaSource::Url { url } if *kind == MediaKind::Image => CreateMessage::new()
                    .content(caption)
                    .embed(CreateEmbed::new().image(url.clone())),
                MediaSource::Url { url } => {
                    let text =
                        if caption.is_empty() { url.clone() } else { format!("{caption}\n{url}") };
                    CreateMessage::new().content(text)
                }
                MediaSource::Bytes { data, file_name, .. } => {
                    let name = file_name.clone().unwrap_or_else(|| "file".to_owned());
                    let file = CreateAttachment::bytes(data.to_vec(), name);
                    files.push(file.clone());
                    CreateMessage::new().content(caption).add_file(file)
                }
                _ => return Err(invalid("a media source discord cannot send")),
            }
        }
        OutboundContent::Location { latitude, longitude, name } => {
            let link = format!("https://www.openstreetmap.org/?mlat={latitude}&mlon={longitude}");
            let text = name.as_ref().map_or_else(|| link.clone(), |n| format!("{n}\n{link}"));
            CreateMessage::new().content(text)
        }
        OutboundContent::Template { .. } => {
            return Err(invalid("discord has no message templates: send text instead"));
        }
        OutboundContent::Reaction { .. } => {
            return Err(invalid("a reaction is not a message"));
        }
        _ => return Err(invalid("content discord cannot send")),
    };
    if let Some(to) = &message.reply_to {
        let channel = ChannelId::new(snowflake(message.chat.as_str(), "chat")?);
        let to = DiscordMessageId::new(snowflake(to.as_str(), "message")?);
        builder = builder.reference_message(MessageReference::from((channel, to)));
    }
    if let Some(key) = &message.idempotency_key {
        builder = builder.nonce(Nonce::String(nonce_of(key))).enforce_nonce(true);
    }
    Ok((builder, files))
}

/// Sends `message` through `inner`'s HTTP client.
pub(crate) async fn send(inner: &Inner, message: &Outbound) -> Result<SendReceipt> {
    let chat = message.chat.as_str();
    let channel = ChannelId::new(snowflake(chat, "chat")?);
    if let OutboundContent::Reaction { to, emoji } = &message.content {
        let to = DiscordMessageId::new(snowflake(to.as_str(), "message")?);
        let Some(emoji) = emoji else {
            return Err(invalid("discord takes a reaction back by its emoji: send none"));
        };
        let emoji = ReactionType::Unicode(emoji.clone());
        let reacted = inner.http.create_reaction(channel, to, &emoji).await;
        reacted.map_err(|e| typed(inner.id(), "react", chat, e))?;
        return Ok(SendReceipt::new(None));
    }
    let (builder, files) = build(message)?;
    let mut request =
        Request::new(Route::ChannelMessages { channel_id: channel }, LightMethod::Post);
    if files.is_empty() {
        let body =
            serde_json::to_vec(&builder).map_err(|e| Error::provider(inner.id(), "send", e))?;
        request = request.body(Some(body));
    } else {
        let json =
            serde_json::to_string(&builder).map_err(|e| Error::provider(inner.id(), "send", e))?;
        request = request.multipart(Some(Multipart {
            upload: MultipartUpload::Attachments(files),
            payload_json: Some(json),
            fields: Vec::new(),
        }));
    }
    let (status, retry_after, body) = execute(inner, request).await?;
    if !(200..300).contains(&status) {
        return Err(Refusal::read(status, retry_after.as_deref(), &body).typed(
            inner.id(),
            "send",
            chat,
        ));
    }
    let created: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    // A 2xx is a send, even when its answer cannot be read: never an error that sends twice.
    let id = created["id"].as_str().map(MessageId::new);
    Ok(SendReceipt::new(id))
}

/// Runs `request` and returns its status, `Retry-After` header and body, whatever the status.
///
/// Without a proxy, serenity's ratelimiter runs it: it keeps to Discord's per-route buckets,
/// and waits out the global limit and every `429` that says how long itself. With a proxy,
/// serenity leaves rate limiting to the proxy (its ratelimiter cannot reach one), so the
/// request goes out as it is and a `429` comes back to the bot.
async fn execute(inner: &Inner, request: Request<'_>) -> Result<(u16, Option<String>, Vec<u8>)> {
    let failed = |e: serenity::Error| Error::provider(inner.id(), "send", e);
    let response = match &inner.http.ratelimiter {
        Some(limiter) => limiter.perform(request).await.map_err(failed)?,
        None => {
            let http = &inner.http;
            let built = request.build(&inner.client, http.token(), http.proxy.as_deref());
            let built = built.map_err(failed)?.build();
            let built = built.map_err(|e| Error::provider(inner.id(), "send", e))?;
            inner.client.execute(built).await.map_err(|e| Error::provider(inner.id(), "send", e))?
        }
    };
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.bytes().await.map_err(|e| Error::provider(inner.id(), "send", e))?;
    Ok((status, retry_after, body.to_vec()))
}

#[cfg(test)]
mod tests {
    use botmesh_traits::Button;

    use super::*;

    fn json_of(message: &Outbound) -> serde_json::Value {
        serde_json::to_value(build(message).unwrap().0).unwrap()
    }

    #[test]
    fn buttons_go_out_in_rows_of_five_with_a_reply_reference_and_a_stable_nonce() {
        let buttons: Vec<Button> =
            (0..7).map(|n| Button::new(format!("b{n}"), format!("B {n}"))).collect();
        let message = Outbound::new("7", OutboundContent::Buttons { body: "pick".into(), buttons })
            .reply_to("41".into())
            .with_idempotency_key("outbox:discord:7/11:3");
        let json = json_of(&message);
        assert_eq!(json["content"], "pick");
        let rows = json["components"].as_array().unwrap();
        assert_eq!(
            rows.iter().map(|r| r["components"].as_array().unwrap().len()).collect::<Vec<_>>(),
            [5, 2]
        );
        assert_eq!(
            (
                rows[1]["components"][1]["custom_id"].as_str(),
                rows[1]["components"][1]["label"].as_str()
            ),
            (Some("b6"), Some("B 6"))
        );
        assert_eq!(json["message_reference"]["message_id"], "41");
        assert_eq!(
            (json["nonce"].as_str().map(str::len), json["enforce_nonce"].as_bool()),
            (Some(18), Some(true))
        );
        assert_eq!(
            json["nonce"].as_str().unwrap(),
            nonce_of("outbox:discord:7/11:3"),
            "the same on every replica"
        );
        assert_ne!(nonce_of("a"), nonce_of("b"));
    }

    #[test]
    fn media_and_places_go_out_as_discord_shows_them_and_the_rest_is_refused() {
        let image = Outbound::new(
            "7",
            OutboundContent::Media {
                kind: MediaKind::Image,
                source: MediaSource::url("https://x/a.png"),
                caption: Some("cat".into()),
            },
        );
        let json = json_of(&image);
        assert_eq!(
            (json["content"].as_str(), json["embeds"][0]["image"]["url"].as_str()),
            (Some("cat"), Some("https://x/a.png"))
        );
        let upload = Outbound::new(
            "7",
            OutboundContent::Media {
                kind: MediaKind::Document,
                source: MediaSource::bytes(b"hi".to_vec(), Some("a.txt".into()), None),
                caption: None,
            },
        );
        let (_, files) = build(&upload).unwrap();
        assert_eq!(files.len(), 1);
        let place = Outbound::new(
            "7",
            OutboundContent::Location { latitude: 1.5, longitude: 2.0, name: Some("Here".into()) },
        );
        assert_eq!(
            json_of(&place)["content"],
            "Here\nhttps://www.openstreetmap.org/?mlat=1.5&mlon=2"
        );
        let template = Outbound::new(
            "7",
            OutboundContent::Template { name: "t".into(), language: "en".into(), params: vec![] },
        );
        assert!(matches!(build(&template), Err(Error::InvalidInput { .. })));
        let too_many: Vec<Button> = (0..26).map(|n| Button::new(n.to_string(), "x")).collect();
        let refused =
            Outbound::new("7", OutboundContent::Buttons { body: "x".into(), buttons: too_many });
        assert!(matches!(build(&refused), Err(Error::InvalidInput { .. })));
        let bad_chat = Outbound::text("general", "hi").reply_to("1".into());
        assert!(matches!(build(&bad_chat), Err(Error::InvalidInput { .. })));
    }
}
