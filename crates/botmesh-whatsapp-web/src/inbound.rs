//! From what a session receives to botmesh messages and events.
//!
//! A user's message becomes an [`Inbound`] whose chat is the chat's JID; in a group the author
//! is the participant, so each member has a conversation of their own. A status update (a
//! message to `status@broadcast`) is an event, never a message: it wakes no conversation.
//! Messages the bot's own number sent from the phone are not the users' and are skipped.

use botmesh_traits::{Contact, Content, Inbound, Media, MediaKind, MessageId};

use crate::events::WhatsAppEvent;
use crate::ids::message_id;
use crate::seam::{WaBody, WaContact, WaIncoming, WaMedia, WaMediaKind};

/// The chat WhatsApp posts status updates to.
pub(crate) const STATUS_BROADCAST: &str = "status@broadcast";

/// What a received message is for the bot.
#[derive(Debug)]
pub(crate) enum Mapped {
    /// A message for the bot's conversations.
    Message(Inbound),
    /// Something to report as an event only (a status update).
    Event(WhatsAppEvent),
    /// Nothing for the bot (its own number wrote it).
    Skip,
}

/// Maps one received message of provider `provider`.
pub(crate) fn map(provider: &str, m: &WaIncoming) -> Mapped {
    if m.key.from_me {
        return Mapped::Skip;
    }
    let content = content(&m.body);
    let id = message_id(&m.key);
    if m.key.chat == STATUS_BROADCAST {
        return Mapped::Event(WhatsAppEvent::Status {
            id,
            from: m.sender.clone(),
            sender_name: m.push_name.clone(),
            content,
        });
    }
    let mut inbound = Inbound::new(provider, id, m.key.chat.as_str(), content).at(m.timestamp_ms);
    if let Some(name) = &m.push_name {
        inbound = inbound.with_sender_name(name.clone());
    }
    if is_group(&m.key.chat) {
        inbound = inbound.in_group(m.key.participant.clone().unwrap_or_else(|| m.sender.clone()));
    }
    if let Some(quoted) = &m.quoted {
        inbound = inbound.replying_to(message_id(quoted));
    }
    Mapped::Message(inbound)
}

/// Whether `jid` is a group chat.
pub(crate) fn is_group(jid: &str) -> bool {
    jid.ends_with("@g.us")
}

fn media(m: &WaMedia) -> Media {
    let mut media = Media::new(m.handle.clone());
    if let Some(mime) = &m.mime {
        media = media.with_mime(mime.clone());
    }
    if let Some(name) = &m.file_name {
        media = media.with_file_name(name.clone());
    }
    if let Some(size) = m.size {
        media = media.with_size(size);
    }
    media
}

fn contact(c: &WaContact) -> Contact {
    let mut contact = Contact::new(c.name.clone());
    for phone in &c.phones {
        contact = contact.with_phone(phone.clone());
    }
    if let Some(id) = &c.wa_id {
        contact = contact.with_user_id(id.clone());
    }
    contact
}

/// What a message body is in botmesh's model.
pub(crate) fn content(body: &WaBody) -> Content {
    match body {
        WaBody::Text(text) => Content::text(text.clone()),
        WaBody::Media { kind: WaMediaKind::Voice, media: m, seconds, .. } => {
            Content::Voice { media: media(m), seconds: *seconds }
        }
        WaBody::Media { kind, media: m, caption, .. } => {
            let kind = match kind {
                WaMediaKind::Image => MediaKind::Image,
                WaMediaKind::Video => MediaKind::Video,
                WaMediaKind::Sticker => MediaKind::Sticker,
                WaMediaKind::Audio => MediaKind::Audio,
                _ => MediaKind::Document,
            };
            Content::Media { kind, media: media(m), caption: caption.clone() }
        }
        WaBody::Location { latitude, longitude, name } => {
            Content::Location { latitude: *latitude, longitude: *longitude, name: name.clone() }
        }
        WaBody::Contacts(cards) => {
            Content::Contacts { contacts: cards.iter().map(contact).collect() }
        }
        WaBody::ButtonReply { id, title } => {
            Content::Button { id: id.clone(), title: title.clone() }
        }
        WaBody::Reaction { to, emoji } => {
            Content::Reaction { to: MessageId::from(message_id(to)), emoji: emoji.clone() }
        }
        WaBody::Edit { of, body } => {
            Content::Edit { of: MessageId::from(message_id(of)), content: Box::new(content(body)) }
        }
        WaBody::Other { kind, raw } => {
            Content::Unsupported { kind: kind.clone(), raw: raw.clone() }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::seam::WaKey;

    use super::*;

    const ANA: &str = "34600000001@s.whatsapp.net";

    fn message(m: Mapped) -> Inbound {
        match m {
            Mapped::Message(m) => m,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn a_group_message_is_keyed_per_member_and_a_reply_names_the_quoted_message() {
        let quoted = WaKey::new("9@g.us", "Q1").mine();
        let m = WaIncoming::new("9@g.us", "M1", ANA, WaBody::Text("hi".into()))
            .with_push_name("Ana")
            .quoting(quoted);
        let inbound = message(map("wa", &m));
        assert_eq!(inbound.key().as_str(), format!("wa:9@g.us/{ANA}"));
        assert_eq!(inbound.id.as_str(), format!("9@g.us/{ANA}/M1"));
        assert_eq!(inbound.reply_to.unwrap().as_str(), "9@g.us/me/Q1");
        assert_eq!(inbound.sender_name.as_deref(), Some("Ana"));
    }

    #[test]
    fn status_updates_are_events_and_the_bot_s_own_messages_are_skipped() {
        let status = WaIncoming::new(STATUS_BROADCAST, "S1", ANA, WaBody::Text("hola".into()));
        assert!(matches!(map("wa", &status), Mapped::Event(WhatsAppEvent::Status { .. })));
        let mut own = WaIncoming::new(ANA, "O1", ANA, WaBody::Text("from the phone".into()));
        own.key = own.key.mine();
        assert!(matches!(map("wa", &own), Mapped::Skip));
    }

    #[test]
    fn a_voice_note_is_a_voice_and_an_audio_file_is_media() {
        let m = WaMedia::new("h").with_mime("audio/ogg; codecs=opus");
        let voice = WaBody::Media {
            kind: WaMediaKind::Voice,
            media: m.clone(),
            caption: None,
            seconds: Some(3),
        };
        assert!(matches!(content(&voice), Content::Voice { seconds: Some(3), .. }));
        let audio =
            WaBody::Media { kind: WaMediaKind::Audio, media: m, caption: None, seconds: None };
        assert!(matches!(content(&audio), Content::Media { kind: MediaKind::Audio, .. }));
    }
}
