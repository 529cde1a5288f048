//! A message a user sent to the bot.

use serde::{Deserialize, Serialize};

use super::{ChatId, ChatKey, Content, MessageId};

/// A message a user sent to the bot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Inbound {
    /// The provider's id for this message.
    pub id: MessageId,
    /// The chat it was sent in.
    pub chat: ChatId,
    /// In a group, the member who sent it.
    pub participant: Option<String>,
    /// The sender's display name, when the platform gives one.
    pub sender_name: Option<String>,
    /// What it carries.
    pub content: Content,
    /// The message it answers or quotes, when the user replied to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<MessageId>,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The sender's language (a BCP 47 tag such as `es`), when the platform gives one.
    pub lang: Option<String>,
    /// The id of the provider that received it. Replies go out through that provider.
    pub provider: String,
}

impl Inbound {
    /// A text message from a one-to-one chat.
    pub fn text(
        provider: impl Into<String>,
        id: impl Into<MessageId>,
        chat: impl Into<ChatId>,
        body: impl Into<String>,
    ) -> Self {
        Self::new(provider, id, chat, Content::Text { body: body.into() })
    }

    /// A message with any content from a one-to-one chat.
    pub fn new(
        provider: impl Into<String>,
        id: impl Into<MessageId>,
        chat: impl Into<ChatId>,
        content: Content,
    ) -> Self {
        Self {
            id: id.into(),
            chat: chat.into(),
            participant: None,
            sender_name: None,
            content,
            reply_to: None,
            timestamp_ms: 0,
            lang: None,
            provider: provider.into(),
        }
    }

    /// Marks the message as sent by `participant` in a group chat.
    #[must_use]
    pub fn in_group(mut self, participant: impl Into<String>) -> Self {
        self.participant = Some(participant.into());
        self
    }

    /// Sets the send time, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn at(mut self, timestamp_ms: u64) -> Self {
        self.timestamp_ms = timestamp_ms;
        self
    }

    /// Sets the sender's language.
    #[must_use]
    pub fn with_lang(mut self, lang: impl Into<String>) -> Self {
        self.lang = Some(lang.into());
        self
    }

    /// Sets the sender's display name.
    #[must_use]
    pub fn with_sender_name(mut self, name: impl Into<String>) -> Self {
        self.sender_name = Some(name.into());
        self
    }

    /// Marks the message as a reply to (a quote of) message `id`.
    #[must_use]
    pub fn replying_to(mut self, id: impl Into<MessageId>) -> Self {
        self.reply_to = Some(id.into());
        self
    }

    /// The ordering key: the provider and the chat, and the participant in a group.
    pub fn key(&self) -> ChatKey {
        let chat = self.chat.as_str();
        match &self.participant {
            None => ChatKey::joined(&[&self.provider, ":", chat]),
            Some(p) => ChatKey::joined(&[&self.provider, ":", chat, "/", p]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_of_a_group_message_is_per_participant() {
        let a = Inbound::text("t", "1", "group", "hi").in_group("ana");
        let b = Inbound::text("t", "2", "group", "hi").in_group("bob");
        assert_ne!(a.key(), b.key());
        assert_eq!(a.key().as_str(), "t:group/ana");
    }

    #[test]
    fn a_long_key_is_whole() {
        let chat = "c".repeat(200);
        let m = Inbound::text("t", "1", chat.as_str(), "hi").in_group("ana");
        assert_eq!(m.key().as_str(), format!("t:{chat}/ana"));
        let short = Inbound::text("t", "1", "é", "hi");
        assert_eq!(short.key().as_str(), "t:é");
    }

    #[test]
    fn the_same_chat_on_two_providers_has_two_keys() {
        let tg = Inbound::text("telegram", "1", "42", "hi");
        let mail = Inbound::text("email", "1", "42", "hi");
        assert_ne!(tg.key(), mail.key());
        assert_eq!(tg.key().as_str(), "telegram:42");
    }
}
