//! Built-in texts, localized, and overridable by the bot's author.

use std::collections::HashMap;

/// Keys of the texts the runtime itself sends.
pub mod keys {
    /// Sent when an answer does not pass a question's validation and no other text is given.
    pub const INVALID: &str = "core.flow.invalid";
    /// Sent when an answer is not one of a question's choices; `{options}` lists them.
    pub const CHOOSE: &str = "core.flow.choose";
    /// Sent when a conversation times out waiting for an answer.
    pub const TIMEOUT: &str = "core.conversation.timeout";
    /// Sent when a conversation could not continue and was interrupted.
    pub const INTERRUPTED: &str = "core.conversation.interrupted";
    /// The words that cancel a waiting conversation, comma-separated, for
    /// [`Trigger::text`](crate::Trigger::text).
    pub const CANCEL_WORDS: &str = "core.conversation.cancel_words";
    /// Sent when a conversation was cancelled; an empty text sends nothing.
    pub const CANCELLED: &str = "core.conversation.cancelled";
}

const BUILT_IN: &[(&str, &str, &str)] = &[
    ("en", keys::INVALID, "Sorry, I didn't understand that. Please try again."),
    ("es", keys::INVALID, "Perdona, no lo he entendido. Inténtalo de nuevo."),
    ("en", keys::CHOOSE, "Please answer with one of: {options}"),
    ("es", keys::CHOOSE, "Responde con una de estas opciones: {options}"),
    ("en", keys::TIMEOUT, "This conversation timed out. Send a message to start again."),
    ("es", keys::TIMEOUT, "La conversación ha caducado. Escribe de nuevo para empezar."),
    ("en", keys::INTERRUPTED, "Sorry, our conversation was interrupted. Let's start again."),
    ("es", keys::INTERRUPTED, "Perdona, nuestra conversación se interrumpió. Empecemos de nuevo."),
    ("en", keys::CANCEL_WORDS, "cancel, stop, /cancel"),
    ("es", keys::CANCEL_WORDS, "cancelar, parar, /cancel"),
    ("en", keys::CANCELLED, "Cancelled. Send a message whenever you want to start again."),
    ("es", keys::CANCELLED, "Cancelado. Escribe cuando quieras empezar de nuevo."),
];

/// A catalogue of texts by language and key.
///
/// Lookups fall back from the asked language (`es-MX`) to its primary subtag (`es`), then to the
/// bot's default language, then to English, then to the key itself.
///
/// ```
/// use botmesh_core::Texts;
///
/// let mut texts = Texts::new("en");
/// texts.set("es", "thanks", "¡Gracias, {name}!");
/// assert_eq!(texts.format(Some("es-MX"), "thanks", &[("name", "Ada")]), "¡Gracias, Ada!");
/// assert_eq!(texts.get(Some("fr"), "thanks"), "thanks");
/// ```
#[derive(Debug, Clone)]
pub struct Texts {
    default_lang: String,
    by_lang: HashMap<String, HashMap<String, String>>,
}

impl Default for Texts {
    fn default() -> Self {
        Self::new("en")
    }
}

impl Texts {
    /// The built-in English and Spanish texts, with `default_lang` as the fallback language.
    pub fn new(default_lang: impl Into<String>) -> Self {
        let mut t = Self { default_lang: default_lang.into(), by_lang: HashMap::new() };
        for (lang, key, text) in BUILT_IN {
            t.set(lang, key, text);
        }
        t
    }

    /// Adds or replaces a text.
    pub fn set(&mut self, lang: &str, key: &str, text: &str) {
        self.by_lang.entry(lang.to_ascii_lowercase()).or_default().insert(key.into(), text.into());
    }

    /// The fallback language.
    pub fn default_lang(&self) -> &str {
        &self.default_lang
    }

    /// The text for `key` in `lang`, following the fallback chain.
    pub fn get<'a>(&'a self, lang: Option<&str>, key: &'a str) -> &'a str {
        let lang = lang.map(str::to_ascii_lowercase);
        let primary = lang.as_deref().and_then(|l| l.split(['-', '_']).next());
        [lang.as_deref(), primary, Some(self.default_lang.as_str()), Some("en")]
            .into_iter()
            .flatten()
            .find_map(|l| self.by_lang.get(l).and_then(|m| m.get(key)))
            .map_or(key, String::as_str)
    }

    /// The text for `key` in `lang` with each `{name}` replaced by its value.
    pub fn format(&self, lang: Option<&str>, key: &str, args: &[(&str, &str)]) -> String {
        let mut out = self.get(lang, key).to_owned();
        for (name, value) in args {
            out = out.replace(&format!("{{{name}}}"), value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spanish_is_built_in_and_regional_tags_fall_back_to_it() {
        let t = Texts::default();
        assert_eq!(t.get(Some("es-MX"), keys::TIMEOUT), t.get(Some("es"), keys::TIMEOUT));
        assert_ne!(t.get(Some("es"), keys::TIMEOUT), t.get(Some("en"), keys::TIMEOUT));
    }

    #[test]
    fn overrides_win_and_unknown_languages_use_the_default() {
        let mut t = Texts::new("es");
        t.set("en", keys::INVALID, "Nope.");
        assert_eq!(t.get(Some("en"), keys::INVALID), "Nope.");
        assert_eq!(t.get(Some("fr"), keys::INVALID), t.get(Some("es"), keys::INVALID));
        assert_eq!(
            t.format(Some("en"), keys::CHOOSE, &[("options", "S, M")]),
            "Please answer with one of: S, M"
        );
    }
}
