//! Message ids: a WhatsApp stanza id is unique only within its chat and author, so botmesh's
//! message id names all three.
//!
//! - a user's message in a one-to-one chat: `<chat>/<stanza>`;
//! - a member's message in a group: `<chat>/<author>/<stanza>`;
//! - the bot's own message: `<chat>/me/<stanza>`.
//!
//! JIDs never contain `/`, so an id reads back into the key a reply, a reaction or a receipt
//! needs.

use crate::seam::WaKey;

/// The author segment of the bot's own messages.
const ME: &str = "me";

/// The botmesh message id of `key`.
pub(crate) fn message_id(key: &WaKey) -> String {
    match (&key.participant, key.from_me) {
        (_, true) => format!("{}/{ME}/{}", key.chat, key.id),
        (Some(author), false) => format!("{}/{author}/{}", key.chat, key.id),
        (None, false) => format!("{}/{}", key.chat, key.id),
    }
}

/// The key a botmesh message id names, or `None` when it is not one of ours.
pub(crate) fn key(id: &str) -> Option<WaKey> {
    let parts: Vec<&str> = id.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    match parts.as_slice() {
        [chat, stanza] if chat.contains('@') => Some(WaKey::new(*chat, *stanza)),
        [chat, ME, stanza] if chat.contains('@') => Some(WaKey::new(*chat, *stanza).mine()),
        [chat, author, stanza] if chat.contains('@') => {
            Some(WaKey::new(*chat, *stanza).by(*author))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_id_reads_back_into_its_key() {
        let keys = [
            WaKey::new("1@s.whatsapp.net", "A1"),
            WaKey::new("9@g.us", "B2").by("2@s.whatsapp.net"),
            WaKey::new("1@s.whatsapp.net", "C3").mine(),
        ];
        for k in keys {
            assert_eq!(key(&message_id(&k)), Some(k));
        }
        assert_eq!(message_id(&WaKey::new("9@g.us", "B2").by("2@lid")), "9@g.us/2@lid/B2");
        assert_eq!(key("cb:1"), None);
        assert_eq!(key("a//b"), None);
        assert_eq!(key("nochat/X"), None);
    }
}
