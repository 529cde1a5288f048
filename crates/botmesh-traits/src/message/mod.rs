//! The message model every provider converts to and from.
//!
//! `content.rs` holds what a message carries, `inbound.rs` a message from a user,
//! `outbound.rs` one the bot sends.

mod content;
mod inbound;
mod outbound;

pub use content::{Contact, Content, Media, MediaKind};
pub use inbound::Inbound;
pub use outbound::{Button, MediaSource, Outbound, OutboundContent};

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps an identifier.
            pub fn new(id: impl AsRef<str>) -> Self {
                Self(Arc::from(id.as_ref()))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }
    };
}

string_id!(
    /// A chat as the provider names it: a phone number, a Telegram chat id, a channel id.
    ChatId
);
string_id!(
    /// The provider's own id for a message, used to drop duplicates.
    MessageId
);
string_id!(
    /// The ordering key of a conversation.
    ///
    /// Messages with one key are handled one at a time, in order; messages with different keys
    /// run in parallel. The key is the provider and the chat (`telegram:42`), and in a group
    /// the participant too (`telegram:-100/7`), so that each member of a group has a
    /// conversation of their own and chats of two providers never share one. Built by
    /// [`Inbound::key`].
    ChatKey
);

impl ChatKey {
    /// The key made of `parts` one after the other, built with one allocation when it is short
    /// (as keys are: a provider, a chat id and maybe a participant), since every message
    /// computes its key.
    pub(crate) fn joined(parts: &[&str]) -> Self {
        /// Keys up to this long are put together on the stack.
        const SHORT: usize = 128;
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        if len <= SHORT {
            let mut buf = [0u8; SHORT];
            let mut at = 0;
            for part in parts {
                buf[at..at + part.len()].copy_from_slice(part.as_bytes());
                at += part.len();
            }
            // Whole strings joined are text; the check cannot fail.
            if let Ok(text) = std::str::from_utf8(&buf[..len]) {
                return Self(Arc::from(text));
            }
        }
        Self(Arc::from(parts.concat()))
    }
}
