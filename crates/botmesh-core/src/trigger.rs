//! What starts a flow or a conversation.

use std::sync::LazyLock;

use regex::Regex;

use crate::{ConfigError, Message, Texts};

/// A condition on a message that starts a flow or conversation.
///
/// ```
/// use botmesh_core::{Inbound, Message, Trigger};
///
/// let order = Trigger::keywords(["order", "buy"]);
/// assert!(order.matches(&Message::new(Inbound::text("t", "m1", "c", "Order"))));
/// assert!(!order.matches(&Message::new(Inbound::text("t", "m2", "c", "hello"))));
/// let code = Trigger::regex(r"^#\d{4}$").expect("a valid pattern");
/// assert!(code.matches(&Message::new(Inbound::text("t", "m3", "c", "#1234"))));
/// ```
#[derive(Debug, Clone)]
pub struct Trigger(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Keywords(Vec<String>),
    Pattern(Regex),
    Type(&'static str),
    /// The comma-separated words of a text, in the message's language.
    Text(String),
    Any,
}

/// The built-in texts, for a text trigger matched outside a bot.
static BUILT_IN: LazyLock<Texts> = LazyLock::new(Texts::default);

impl Trigger {
    /// Matches a message whose body is `word`, ignoring case and surrounding spaces.
    pub fn keyword(word: impl AsRef<str>) -> Self {
        Self::keywords([word])
    }

    /// Matches a message whose body is any of `words`, ignoring case and surrounding spaces.
    pub fn keywords<I, S>(words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self(Kind::Keywords(words.into_iter().map(|w| w.as_ref().trim().to_lowercase()).collect()))
    }

    /// Matches a message whose body the regular expression finds a match in.
    pub fn regex(pattern: &str) -> Result<Self, ConfigError> {
        Regex::new(pattern)
            .map(|r| Self(Kind::Pattern(r)))
            .map_err(|source| ConfigError::InvalidPattern { pattern: pattern.to_owned(), source })
    }

    /// Matches a message whose body is one of the comma-separated words of the text `key` in
    /// the message's language, ignoring case and surrounding spaces: localized keywords that
    /// the bot's author can override like any text. `Trigger::text(keys::CANCEL_WORDS)`
    /// matches `cancel`, `stop` or `/cancel` in English and `cancelar` in Spanish.
    ///
    /// ```
    /// use botmesh_core::{Bot, Trigger, texts::keys};
    ///
    /// let builder = Bot::builder()
    ///     .text("en", keys::CANCEL_WORDS, "cancel, quit, enough")
    ///     .cancel_on(Trigger::text(keys::CANCEL_WORDS));
    /// # let _ = builder;
    /// ```
    pub fn text(key: impl Into<String>) -> Self {
        Self(Kind::Text(key.into()))
    }

    /// Matches an image, video, document, sticker or audio file.
    pub fn media() -> Self {
        Self(Kind::Type("media"))
    }

    /// Matches a voice note.
    pub fn voice() -> Self {
        Self(Kind::Type("voice"))
    }

    /// Matches a shared location.
    pub fn location() -> Self {
        Self(Kind::Type("location"))
    }

    /// Matches a tap on a button.
    pub fn reply() -> Self {
        Self(Kind::Type("reply"))
    }

    /// Matches every message.
    pub fn any() -> Self {
        Self(Kind::Any)
    }

    /// Whether `message` matches; a [`Trigger::text`] looks its words up in the built-in texts.
    pub fn matches(&self, message: &Message) -> bool {
        self.matches_in(message, &BUILT_IN)
    }

    /// Whether `message` matches, looking text triggers up in `texts` (the bot's, with its
    /// overrides).
    pub(crate) fn matches_in(&self, message: &Message, texts: &Texts) -> bool {
        match &self.0 {
            Kind::Keywords(words) => {
                let body = message.body.trim();
                words.iter().any(|w| body.eq_ignore_ascii_case(w) || body.to_lowercase() == *w)
            }
            Kind::Text(key) => {
                let body = message.body.trim();
                texts.get(message.lang.as_deref(), key).split(',').map(str::trim).any(|w| {
                    !w.is_empty()
                        && (body.eq_ignore_ascii_case(w) || body.to_lowercase() == w.to_lowercase())
                })
            }
            Kind::Pattern(r) => r.is_match(&message.body),
            Kind::Type(t) => message.kind == *t,
            Kind::Any => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use botmesh_traits::{Content, Inbound};

    fn msg(body: &str) -> Message {
        Message::new(Inbound::text("t", "1", "c", body))
    }

    #[test]
    fn keywords_ignore_case_and_spaces_but_not_other_words() {
        let t = Trigger::keywords(["Order", "pedido"]);
        assert!(t.matches(&msg("  ORDER ")));
        assert!(t.matches(&msg("Pedido")));
        assert!(!t.matches(&msg("order now")));
    }

    #[test]
    fn type_triggers_follow_the_hook_rewritten_kind() {
        let voice = Inbound::new(
            "t",
            "1",
            "c",
            Content::Voice { media: botmesh_traits::Media::new("u"), seconds: Some(2) },
        );
        let mut m = Message::new(voice);
        assert!(Trigger::voice().matches(&m));
        m.set_kind("text");
        assert!(!Trigger::voice().matches(&m));
    }

    #[test]
    fn text_triggers_take_their_words_from_the_texts_in_the_message_language() {
        let cancel = Trigger::text(crate::texts::keys::CANCEL_WORDS);
        assert!(cancel.matches(&msg(" Stop ")));
        assert!(cancel.matches(&msg("/cancel")));
        assert!(!cancel.matches(&msg("stop it")));
        let spanish = Message::new(Inbound::text("t", "1", "c", "Cancelar").with_lang("es"));
        assert!(cancel.matches(&spanish));
        let mut texts = Texts::default();
        texts.set("en", crate::texts::keys::CANCEL_WORDS, "enough");
        assert!(cancel.matches_in(&msg("enough"), &texts));
        assert!(!cancel.matches_in(&msg("stop"), &texts), "the override replaces the words");
    }

    #[test]
    fn a_bad_pattern_is_a_config_error() {
        assert!(matches!(Trigger::regex("("), Err(ConfigError::InvalidPattern { .. })));
        assert!(Trigger::regex("^\\d+$").unwrap().matches(&msg("42")));
    }
}
