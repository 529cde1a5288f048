//! A raw RFC 822 mail as a botmesh message.
//!
//! The text the flow sees is the new part of the mail's plain text (its HTML turned to text
//! when it has none), without the quoted mail and the signature. A mail with attachments is a
//! `Content::Media` whose caption is that text and whose media is the first attachment; the
//! whole mail, its HTML and every attachment are fetched through `fetch_media` (see
//! [`crate::media`]).
//!
//! A mail is **malformed** when the parser finds no header in it, no sender address to answer,
//! or a multipart body without the boundary that separates its parts: it never reaches the bot.
//! Other damage (a last part cut short, a bad encoding) is read as well as it can be, as mail
//! clients do.

use botmesh_traits::{ChatId, Content, Inbound, Media, MediaKind, MessageId};
use mail_parser::{Address, HeaderValue, MessageParser, MimeHeaders};
use sha2::{Digest, Sha256};

use crate::archive::Kept;
use crate::config::Threading;
use crate::media;
use crate::text::new_part;

/// A mail ready for the bot, and what is kept of it.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) inbound: Inbound,
    pub(crate) kept: Kept,
}

/// The ids a header holds (`References`, `In-Reply-To`), without angle brackets.
fn ids(value: &HeaderValue<'_>) -> Vec<String> {
    let bare = |s: &str| s.trim().trim_start_matches('<').trim_end_matches('>').to_owned();
    match value {
        HeaderValue::Text(t) => t.split_whitespace().map(bare).collect(),
        HeaderValue::TextList(list) => list.iter().map(|t| bare(t)).collect(),
        _ => Vec::new(),
    }
}

fn sender(from: Option<&Address<'_>>) -> Option<(String, Option<String>)> {
    let first = from?.first()?;
    let address = first.address()?.trim().to_lowercase();
    if !address.contains('@') {
        return None;
    }
    Some((address, first.name().map(str::to_owned)))
}

fn kind_of(mime: &str) -> MediaKind {
    match mime.split('/').next().unwrap_or_default() {
        "image" => MediaKind::Image,
        "video" => MediaKind::Video,
        "audio" => MediaKind::Audio,
        _ => MediaKind::Document,
    }
}

/// The id of a mail without a `Message-ID`: a digest of its bytes, so that a redelivery of the
/// same mail has the same id.
fn digest_id(raw: &[u8]) -> String {
    let hash = Sha256::digest(raw);
    let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}@sha256.botmesh")
}

/// The message id of the mail with `Message-ID` `id` (without angle brackets) from `address`
/// (lowercased): the hex of the first 16 bytes of the SHA-256 of `address`, a newline and
/// `id`. A `Message-ID` is chosen by the sender, so it is not unique alone: keyed with the
/// sender's address, a stranger reusing someone's `Message-ID` neither gets their mail
/// dropped as a duplicate of the other's nor replaces the other's kept mail.
pub(crate) fn message_key(address: &str, id: &str) -> String {
    let hash = Sha256::digest(format!("{address}\n{id}").as_bytes());
    hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The chat a mail belongs to under `threading`.
pub(crate) fn chat_of(
    threading: Threading,
    address: &str,
    own: &str,
    references: &[String],
    in_reply_to: &[String],
) -> ChatId {
    match threading {
        Threading::Correspondent => ChatId::new(address),
        Threading::Thread => {
            let root = references.first().or(in_reply_to.first()).map_or(own, String::as_str);
            ChatId::from(format!("{address}#{root}"))
        }
    }
}

/// The address a chat id sends to: the part before `#` in a thread chat.
pub(crate) fn address_of(chat: &str) -> &str {
    match chat.find('@') {
        Some(at) => chat[at..].find('#').map_or(chat, |h| &chat[..at + h]),
        None => chat,
    }
}

/// Parses `raw` into a message for provider `provider`; the reason when it is malformed.
pub(crate) fn parse(provider: &str, raw: &[u8], threading: Threading) -> Result<Parsed, String> {
    let message = MessageParser::default().parse(raw).ok_or("no headers could be read")?;
    if message.headers().is_empty() {
        return Err("no headers could be read".to_owned());
    }
    let (address, name) = sender(message.from()).ok_or("no sender address in its From header")?;
    if let Some(ct) = message.content_type()
        && ct.ctype().eq_ignore_ascii_case("multipart")
        && !ct.has_attribute("boundary")
    {
        return Err(
            "a multipart body without a boundary: its parts cannot be told apart".to_owned()
        );
    }
    let id = message.message_id().map_or_else(|| digest_id(raw), |id| id.trim().to_owned());
    let references = ids(message.references());
    let in_reply_to = ids(message.in_reply_to());
    let chat = chat_of(threading, &address, &id, &references, &in_reply_to);
    let key = message_key(&address, &id);
    let text = message.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
    let body = new_part(&text);
    let content = match message.attachments().next() {
        Some(part) => {
            let mime = part.content_type().map(|ct| match ct.subtype() {
                Some(sub) => format!("{}/{sub}", ct.ctype()),
                None => ct.ctype().to_owned(),
            });
            let mut media = Media::new(media::attachment_url(&key, 0))
                .with_size(u64::try_from(part.contents().len()).unwrap_or(u64::MAX));
            if let Some(name) = part.attachment_name() {
                media = media.with_file_name(name);
            }
            let kind = kind_of(mime.as_deref().unwrap_or_default());
            if let Some(mime) = mime {
                media = media.with_mime(mime);
            }
            Content::Media { kind, media, caption: Some(body) }
        }
        None => Content::text(body),
    };
    let mut inbound = Inbound::new(provider, MessageId::new(&key), chat, content);
    if let Some(name) = name {
        inbound = inbound.with_sender_name(name);
    }
    if let Some(date) = message.date() {
        inbound = inbound.at(u64::try_from(date.to_timestamp()).unwrap_or(0).saturating_mul(1000));
    }
    if let Some(parent) = in_reply_to.first() {
        inbound = inbound.replying_to(MessageId::new(parent));
    }
    let mut thread = references;
    if thread.is_empty() {
        thread.clone_from(&in_reply_to);
    }
    let kept = Kept {
        id,
        subject: message.subject().map(str::to_owned),
        references: thread,
        raw: Kept::encode(raw),
    };
    Ok(Parsed { inbound, kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "From: Ana <Ana@Example.org>\r\nTo: bot@x.org\r\nSubject: Re: Order\r\n\
        Message-ID: <m2@example.org>\r\nIn-Reply-To: <b1@x.org>\r\n\
        References: <m1@example.org> <b1@x.org>\r\n\r\nTwo, please.\r\n\r\n\
        On Mon, Bot <bot@x.org> wrote:\r\n> How many?\r\n";

    #[test]
    fn a_reply_maps_to_its_correspondent_or_its_thread_with_the_new_text_only() {
        let by_person = parse("email", REPLY.as_bytes(), Threading::Correspondent).unwrap();
        let m = &by_person.inbound;
        assert_eq!(m.chat.as_str(), "ana@example.org");
        assert_eq!(m.id.as_str(), message_key("ana@example.org", "m2@example.org"));
        assert_eq!(by_person.kept.id, "m2@example.org", "kept for In-Reply-To as it is");
        assert_eq!(m.content.as_text(), Some("Two, please."));
        assert_eq!(m.reply_to.as_ref().map(MessageId::as_str), Some("b1@x.org"));
        assert_eq!(m.sender_name.as_deref(), Some("Ana"));
        assert_eq!(by_person.kept.references, ["m1@example.org", "b1@x.org"]);
        assert_eq!(by_person.kept.subject.as_deref(), Some("Re: Order"));
        let by_thread = parse("email", REPLY.as_bytes(), Threading::Thread).unwrap();
        assert_eq!(by_thread.inbound.chat.as_str(), "ana@example.org#m1@example.org");
        assert_eq!(address_of(by_thread.inbound.chat.as_str()), "ana@example.org");
        assert_eq!(address_of("ana@example.org"), "ana@example.org");
    }

    #[test]
    fn a_mail_without_a_sender_or_headers_is_malformed() {
        assert!(parse("e", b"", Threading::Correspondent).is_err());
        let anonymous = b"Subject: hi\r\n\r\nhello\r\n";
        assert!(parse("e", anonymous, Threading::Correspondent).unwrap_err().contains("sender"));
        let unbounded = b"From: a@b.org\r\nContent-Type: multipart/mixed\r\n\r\n--x\r\nhi\r\n";
        assert!(parse("e", unbounded, Threading::Correspondent).unwrap_err().contains("boundary"));
    }

    #[test]
    fn a_mail_with_an_attachment_is_media_captioned_with_its_text() {
        let raw = "From: a@b.org\r\nMessage-ID: <x@b>\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=\"zz\"\r\n\r\n--zz\r\n\
            Content-Type: text/plain\r\n\r\nsee attached\r\n--zz\r\n\
            Content-Type: application/pdf; name=\"q.pdf\"\r\n\
            Content-Disposition: attachment; filename=\"q.pdf\"\r\n\
            Content-Transfer-Encoding: base64\r\n\r\nJVBERg==\r\n--zz--\r\n";
        let parsed = parse("e", raw.as_bytes(), Threading::Correspondent).unwrap();
        let Content::Media { kind, media, caption } = &parsed.inbound.content else {
            panic!("{:?}", parsed.inbound.content)
        };
        assert_eq!((kind, caption.as_deref()), (&MediaKind::Document, Some("see attached")));
        assert_eq!(media.file_name.as_deref(), Some("q.pdf"));
        assert_eq!(media.mime.as_deref(), Some("application/pdf"));
        assert_eq!(media.url, format!("email:{}/attachment/0", message_key("a@b.org", "x@b")));
    }

    #[test]
    fn a_mail_without_a_message_id_gets_a_stable_one() {
        let raw = b"From: a@b.org\r\n\r\nhi\r\n";
        let one = parse("e", raw, Threading::Correspondent).unwrap().inbound.id;
        let two = parse("e", raw, Threading::Correspondent).unwrap().inbound.id;
        assert_eq!(one, two);
    }

    #[test]
    fn the_same_message_id_from_two_senders_makes_two_messages() {
        let from = |who: &str| format!("From: {who}\r\nMessage-ID: <same@x>\r\n\r\nhi\r\n");
        let ana = parse("e", from("ana@x.org").as_bytes(), Threading::Correspondent).unwrap();
        let bob = parse("e", from("bob@x.org").as_bytes(), Threading::Correspondent).unwrap();
        assert_ne!(ana.inbound.id, bob.inbound.id);
        assert_eq!((ana.kept.id.as_str(), bob.kept.id.as_str()), ("same@x", "same@x"));
        let again = parse("e", from("Ana@X.org").as_bytes(), Threading::Correspondent).unwrap();
        assert_eq!(ana.inbound.id, again.inbound.id, "a redelivery keeps its id");
    }
}
