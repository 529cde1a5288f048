//! From botmesh's outbound messages to what a session sends.
//!
//! A chat is a JID; bare digits are taken as a phone number (`<digits>@s.whatsapp.net`).
//! WhatsApp Web sends no buttons a linked device can rely on, so buttons go out as a numbered
//! list under the text. An audio file whose MIME type is Opus (`audio/ogg; codecs=opus`) goes
//! out as a voice note. Templates are the Cloud API's: refused here.

use botmesh_traits::{MediaKind, MediaSource, Outbound, OutboundContent};

use crate::error::{Error, Result};
use crate::ids;
use crate::seam::{WaFile, WaMediaKind, WaOutgoing, WaOutgoingBody};

/// The JID of `chat`: itself when it is one, a phone number's otherwise.
pub(crate) fn jid(chat: &str) -> Result<String> {
    if chat.contains('@') && !chat.starts_with('@') && !chat.ends_with('@') {
        return Ok(chat.to_owned());
    }
    let digits = chat.strip_prefix('+').unwrap_or(chat);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        return Ok(format!("{digits}@s.whatsapp.net"));
    }
    Err(Error::InvalidInput { reason: format!("{chat:?} is neither a WhatsApp JID nor a number") })
}

fn file(source: &MediaSource) -> Result<WaFile> {
    match source {
        MediaSource::Url { url } => Ok(WaFile::Url(url.clone())),
        MediaSource::Bytes { data, file_name, mime } => Ok(WaFile::Bytes {
            data: data.clone(),
            mime: mime.clone(),
            file_name: file_name.clone(),
        }),
        _ => Err(Error::Unsupported { what: "this media source" }),
    }
}

fn is_opus(source: &MediaSource) -> bool {
    matches!(source, MediaSource::Bytes { mime: Some(m), .. } if m.contains("opus"))
        || matches!(source, MediaSource::Url { url } if url.ends_with(".opus"))
}

/// What the session sends for `message`.
pub(crate) fn to_wa(message: &Outbound) -> Result<WaOutgoing> {
    let chat = jid(message.chat.as_str())?;
    let body = match &message.content {
        OutboundContent::Text { body } => WaOutgoingBody::Text(body.clone()),
        OutboundContent::Buttons { body, buttons } => {
            let mut text = body.clone();
            text.push('\n');
            for (n, b) in buttons.iter().enumerate() {
                text.push_str(&format!("\n{}. {}", n + 1, b.title));
            }
            WaOutgoingBody::Text(text)
        }
        OutboundContent::Media { kind, source, caption } => {
            let kind = match kind {
                MediaKind::Image => WaMediaKind::Image,
                MediaKind::Video => WaMediaKind::Video,
                MediaKind::Sticker => WaMediaKind::Sticker,
                MediaKind::Audio if is_opus(source) => WaMediaKind::Voice,
                MediaKind::Audio => WaMediaKind::Audio,
                _ => WaMediaKind::Document,
            };
            WaOutgoingBody::Media { kind, file: file(source)?, caption: caption.clone() }
        }
        OutboundContent::Location { latitude, longitude, name } => WaOutgoingBody::Location {
            latitude: *latitude,
            longitude: *longitude,
            name: name.clone(),
        },
        OutboundContent::Reaction { to, emoji } => {
            let Some(to) = ids::key(to.as_str()) else {
                let reason = format!("{to} is not a WhatsApp Web message id");
                return Err(Error::InvalidInput { reason });
            };
            WaOutgoingBody::Reaction { to, emoji: emoji.clone() }
        }
        OutboundContent::Template { .. } => {
            return Err(Error::Unsupported { what: "a template (a Cloud API message)" });
        }
        _ => return Err(Error::Unsupported { what: "this content" }),
    };
    let mut out = WaOutgoing::new(chat, body);
    out.quoted = message.reply_to.as_ref().and_then(|id| ids::key(id.as_str()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use botmesh_traits::{Button, MessageId};

    use super::*;

    #[test]
    fn numbers_become_jids_and_garbage_is_refused() {
        assert_eq!(jid("+34600").unwrap(), "34600@s.whatsapp.net");
        assert_eq!(jid("9@g.us").unwrap(), "9@g.us");
        assert!(jid("ana").is_err());
        assert!(jid("").is_err());
    }

    #[test]
    fn buttons_go_out_as_a_numbered_list_and_a_reply_quotes_its_message() {
        let buttons = vec![Button::new("y", "Yes"), Button::new("n", "No")];
        let out = Outbound::new(
            "1@s.whatsapp.net",
            OutboundContent::Buttons { body: "Sure?".into(), buttons },
        )
        .reply_to(MessageId::new("1@s.whatsapp.net/A"));
        let wa = to_wa(&out).unwrap();
        assert_eq!(wa.text(), Some("Sure?\n\n1. Yes\n2. No"));
        assert_eq!(wa.quoted.unwrap().id, "A");
    }

    #[test]
    fn an_opus_file_is_a_voice_note_and_templates_are_refused() {
        let source = MediaSource::bytes(vec![1u8], None, Some("audio/ogg; codecs=opus".into()));
        let out = Outbound::new(
            "1",
            OutboundContent::Media { kind: MediaKind::Audio, source, caption: None },
        );
        assert!(matches!(
            to_wa(&out).unwrap().body,
            WaOutgoingBody::Media { kind: WaMediaKind::Voice, .. }
        ));
        let template =
            OutboundContent::Template { name: "t".into(), language: "en".into(), params: vec![] };
        assert!(matches!(to_wa(&Outbound::new("1", template)), Err(Error::Unsupported { .. })));
    }
}
