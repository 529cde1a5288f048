//! [`Channel`]: which of Meta's messaging products a message goes through.

use std::fmt;

/// One of the messaging products the Graph API stand-in serves.
///
/// A user is known by a different id on each: a WhatsApp id (`wa_id`, the phone number in
/// digits), a page-scoped id (PSID) on Messenger, an Instagram-scoped id (IGSID) on Instagram.
/// The stand-in keys everything per user by `(channel, id)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Channel {
    /// The WhatsApp Cloud API: sends to `/{phone_number_id}/messages`, webhooks with
    /// `"object": "whatsapp_business_account"`.
    WhatsApp,
    /// Messenger: sends to `/{page_id}/messages` (or `/me/messages`), webhooks with
    /// `"object": "page"`.
    Messenger,
    /// Instagram messaging: sends to `/{ig_user_id}/messages`, webhooks with
    /// `"object": "instagram"`.
    Instagram,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 3] = [Self::WhatsApp, Self::Messenger, Self::Instagram];

    /// The webhook body's `object`: `"whatsapp_business_account"`, `"page"` or `"instagram"`.
    pub fn object(self) -> &'static str {
        match self {
            Self::WhatsApp => "whatsapp_business_account",
            Self::Messenger => "page",
            Self::Instagram => "instagram",
        }
    }

    /// A short lowercase name: `"whatsapp"`, `"messenger"` or `"instagram"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WhatsApp => "whatsapp",
            Self::Messenger => "messenger",
            Self::Instagram => "instagram",
        }
    }

    /// Whether the channel speaks the Messenger Platform's shapes (`recipient`, `message`,
    /// `messaging`), which Instagram messaging shares.
    pub(super) fn is_messaging(self) -> bool {
        matches!(self, Self::Messenger | Self::Instagram)
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
