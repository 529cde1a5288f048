//! The three channels and the account each sends from.

/// Which Meta channel a provider speaks, and the account it sends from.
///
/// In a configuration file (`serde` feature): `kind` (`"whatsapp"`, `"messenger"` or
/// `"instagram"`) next to the variant's field, as in
/// `{ kind = "whatsapp", phone_number_id = "1234" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)
)]
#[non_exhaustive]
pub enum Channel {
    /// The WhatsApp Cloud API, sending from a business phone number.
    WhatsApp {
        /// The phone number id (not the number itself), from the app dashboard.
        phone_number_id: String,
    },
    /// Messenger, sending as a Facebook page.
    Messenger {
        /// The page id.
        page_id: String,
    },
    /// Instagram messaging, sending as a professional account.
    Instagram {
        /// The Instagram account id.
        account_id: String,
    },
}

impl Channel {
    /// The provider id a channel has unless told otherwise.
    pub(crate) fn default_id(&self) -> &'static str {
        match self {
            Self::WhatsApp { .. } => "whatsapp",
            Self::Messenger { .. } => "messenger",
            Self::Instagram { .. } => "instagram",
        }
    }

    /// The webhook `object` this channel's bodies carry.
    pub(crate) fn object(&self) -> &'static str {
        match self {
            Self::WhatsApp { .. } => "whatsapp_business_account",
            Self::Messenger { .. } => "page",
            Self::Instagram { .. } => "instagram",
        }
    }

    /// The account messages are sent from: `POST /{account}/messages`.
    pub(crate) fn account(&self) -> &str {
        match self {
            Self::WhatsApp { phone_number_id } => phone_number_id,
            Self::Messenger { page_id } => page_id,
            Self::Instagram { account_id } => account_id,
        }
    }
}
