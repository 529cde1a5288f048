//! What starts a flow or a conversation.

use regex::Regex;

use crate::{ConfigError, Message};

/// A condition on a message that starts a flow or conversation.
#[derive(Debug, Clone)]
pub struct Trigger(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Keywords(Vec<String>),
    Pattern(Regex),
    Type(&'static str),
    Any,
}

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

    /// Whether `message` matches.
    pub fn matches(&self, message: &Message) -> bool {
        match &self.0 {
            Kind::Keywords(words) => {
                let body = message.body.trim();
                words.iter().any(|w| body.eq_ignore_ascii_case(w) || body.to_lowercase() == *w)
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
            Content::Voice { url: "u".into(), mime: None, seconds: Some(2) },
        );
        let mut m = Message::new(voice);
        assert!(Trigger::voice().matches(&m));
        m.set_kind("text");
        assert!(!Trigger::voice().matches(&m));
    }

    #[test]
    fn a_bad_pattern_is_a_config_error() {
        assert!(matches!(Trigger::regex("("), Err(ConfigError::InvalidPattern { .. })));
        assert!(Trigger::regex("^\\d+$").unwrap().matches(&msg("42")));
    }
}
