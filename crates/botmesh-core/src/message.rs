//! The message as handlers see it, after the `before_message` hooks.

use botmesh_traits::{ChatId, ChatKey, Content, Inbound, MessageId};
use serde::{Deserialize, Serialize};

/// An inbound message as the rest of the bot sees it.
///
/// `body`, `kind` and `lang` start from the provider's message and may be rewritten by
/// [`before_message`](crate::BotBuilder::before_message) hooks (a voice note's transcript
/// becomes its body and its kind `text`, say). The original stays in `inbound`.
///
/// ```
/// use botmesh_core::{Inbound, Message};
///
/// let mut message = Message::new(Inbound::text("telegram", "m1", "chat-7", "Hola"));
/// assert_eq!((message.body.as_str(), message.kind.as_str()), ("Hola", "text"));
/// // A hook may rewrite what flows and handlers see; the original stays.
/// message.set_body("hello");
/// assert_eq!(message.inbound.content.as_text(), Some("Hola"));
/// assert_eq!(message.chat().as_str(), "chat-7");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Message {
    /// The text the bot reacts to: the body, a caption, a button title, or a hook's rewrite.
    pub body: String,
    /// The content type ([`Content::type_name`]: `text`, `media`, `voice`, `button`, ...), or
    /// a hook's rewrite.
    pub kind: String,
    /// The language, from the platform or a hook.
    pub lang: Option<String>,
    /// The message as the provider delivered it.
    pub inbound: Inbound,
}

impl Message {
    /// The view of a provider's message before any hook ran.
    pub fn new(inbound: Inbound) -> Self {
        Self {
            body: inbound.content.as_text().unwrap_or_default().to_owned(),
            kind: inbound.content.type_name().to_owned(),
            lang: inbound.lang.clone(),
            inbound,
        }
    }

    /// The provider's message id.
    pub fn id(&self) -> &MessageId {
        &self.inbound.id
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        &self.inbound.chat
    }

    /// The ordering key (see [`ChatKey`]).
    pub fn key(&self) -> ChatKey {
        self.inbound.key()
    }

    /// The content as the provider delivered it.
    pub fn content(&self) -> &Content {
        &self.inbound.content
    }

    /// Replaces the body.
    pub fn set_body(&mut self, body: impl Into<String>) -> &mut Self {
        self.body = body.into();
        self
    }

    /// Replaces the content type.
    pub fn set_kind(&mut self, kind: impl Into<String>) -> &mut Self {
        self.kind = kind.into();
        self
    }

    /// Replaces the language.
    pub fn set_lang(&mut self, lang: impl Into<String>) -> &mut Self {
        self.lang = Some(lang.into());
        self
    }
}
