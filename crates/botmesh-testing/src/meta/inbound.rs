//! [`Inbound`]: what a user does (a message, a button press, a reaction, a receipt), built
//! by the test and delivered by [`GraphServer::deliver`](super::GraphServer::deliver) or,
//! several in one webhook body, by
//! [`GraphServer::deliver_batch`](super::GraphServer::deliver_batch).
//!
//! An `Inbound` holds only what the user did; the stand-in renders it into the channel's
//! webhook shape when it is queued (adding the business's ids, timestamps, media metadata and
//! the quoted message's sender).

use serde_json::{Map, Value};

use super::channel::Channel;
use super::ids;

/// One thing a user did, to be delivered to the bot's webhook. Build it with a constructor,
/// then queue it with [`GraphServer::deliver`](super::GraphServer::deliver).
///
/// Constructors that take a [`Channel`] work on all three, rendered in each channel's shape
/// (see the [module docs](super#webhook-bodies)); the others belong to one platform.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbound {
    pub(super) channel: Channel,
    pub(super) user: String,
    pub(super) id: String,
    pub(super) kind: Kind,
    pub(super) reply_to: Option<String>,
    pub(super) profile_name: Option<String>,
}

/// The status a WhatsApp receipt reports, for [`Inbound::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageStatus {
    /// `"sent"`: WhatsApp took the message.
    Sent,
    /// `"delivered"`: it reached the user's phone.
    Delivered,
    /// `"read"`: the user read it.
    Read,
    /// `"failed"`, with one entry in `errors`.
    Failed {
        /// The error's `code`, e.g. `131026`.
        code: u32,
        /// The error's `title` (also its `message`), e.g. `"Message Undeliverable"`.
        title: String,
    },
}

impl MessageStatus {
    /// The `status` string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Delivered => "delivered",
            Self::Read => "read",
            Self::Failed { .. } => "failed",
        }
    }
}

/// What an [`Inbound`] carries.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Text(String),
    Media {
        kind: String,
        media_id: String,
        caption: Option<String>,
    },
    Reaction {
        message_id: String,
        emoji: String,
    },
    Button {
        payload: String,
        title: String,
    },
    QuickReply {
        payload: String,
        text: String,
    },
    ListReply {
        id: String,
        title: String,
        description: String,
    },
    Location {
        latitude: f64,
        longitude: f64,
    },
    Status(MessageStatus),
    Delivered {
        mids: Vec<String>,
    },
    Read {
        watermark: u64,
    },
    /// A WhatsApp message's fields, merged over `from`, `id` and `timestamp`.
    WhatsApp(Map<String, Value>),
    /// A messaging item's fields, merged over `sender`, `recipient` and `timestamp`.
    Messaging(Map<String, Value>),
}

fn messaging_only(channel: Channel, what: &str) {
    assert!(channel.is_messaging(), "{what} is a Messenger or Instagram event, not WhatsApp's");
}

impl Inbound {
    fn new(channel: Channel, user: &str, kind: Kind) -> Self {
        let id = if channel.is_messaging() { ids::mid() } else { ids::wamid() };
        Self { channel, user: user.to_owned(), id, kind, reply_to: None, profile_name: None }
    }

    /// A text message.
    pub fn text(channel: Channel, user: &str, text: &str) -> Self {
        Self::new(channel, user, Kind::Text(text.to_owned()))
    }

    /// A text message replying to (quoting) an earlier message, the bot's or the user's.
    pub fn reply(channel: Channel, user: &str, to_message_id: &str, text: &str) -> Self {
        Self::text(channel, user, text).in_reply_to(to_message_id)
    }

    /// A media message: `kind` is WhatsApp's media type (`"image"`, `"audio"`, `"video"`,
    /// `"document"`, `"sticker"`, or `"voice"` for a voice note, an `audio` with
    /// `"voice": true`) and `media_id` one that
    /// [`GraphServer::register_media`](super::GraphServer::register_media) gave. On WhatsApp
    /// the message names the media id (with its `mime_type` and `sha256`), which the bot
    /// looks up with `GET /{media_id}`; on Messenger and Instagram it is an attachment whose
    /// `payload.url` serves the bytes without a token (a `"document"` is a `"file"` there, a
    /// `"sticker"` an `"image"`, a `"voice"` an `"audio"`, and a caption becomes the
    /// message's `text`).
    pub fn media(
        channel: Channel,
        user: &str,
        kind: &str,
        media_id: &str,
        caption: Option<&str>,
    ) -> Self {
        let kind = Kind::Media {
            kind: kind.to_owned(),
            media_id: media_id.to_owned(),
            caption: caption.map(str::to_owned),
        };
        Self::new(channel, user, kind)
    }

    /// A reaction to a message; an empty `emoji` removes the user's reaction. On WhatsApp a
    /// `reaction` message, on Messenger and Instagram a `reaction` event (`"action": "react"`,
    /// or `"unreact"` for an empty emoji).
    pub fn reaction(channel: Channel, user: &str, message_id: &str, emoji: &str) -> Self {
        let kind = Kind::Reaction { message_id: message_id.to_owned(), emoji: emoji.to_owned() };
        Self::new(channel, user, kind)
    }

    /// A press on a button the bot sent: on WhatsApp an `interactive` message with a
    /// `button_reply` (`id` = `payload`), on Messenger and Instagram a `postback`.
    pub fn button(channel: Channel, user: &str, payload: &str, title: &str) -> Self {
        let kind = Kind::Button { payload: payload.to_owned(), title: title.to_owned() };
        Self::new(channel, user, kind)
    }

    /// A tap on a quick reply: on Messenger and Instagram a text message with
    /// `quick_reply.payload`, on WhatsApp a `button` message (a template's quick-reply
    /// button: `button.payload`, `button.text`).
    pub fn quick_reply(channel: Channel, user: &str, payload: &str, text: &str) -> Self {
        let kind = Kind::QuickReply { payload: payload.to_owned(), text: text.to_owned() };
        Self::new(channel, user, kind)
    }

    /// A WhatsApp user picks a row of a list message: an `interactive` message with a
    /// `list_reply`.
    pub fn list_reply(wa_id: &str, id: &str, title: &str, description: &str) -> Self {
        let kind = Kind::ListReply {
            id: id.to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
        };
        Self::new(Channel::WhatsApp, wa_id, kind)
    }

    /// A WhatsApp user shares a location.
    pub fn location(wa_id: &str, latitude: f64, longitude: f64) -> Self {
        Self::new(Channel::WhatsApp, wa_id, Kind::Location { latitude, longitude })
    }

    /// A WhatsApp receipt: a `statuses` item about a message the bot sent to `wa_id`. Its
    /// [`id`](Self::id) is that message's.
    pub fn status(wa_id: &str, message_id: &str, status: MessageStatus) -> Self {
        let mut inbound = Self::new(Channel::WhatsApp, wa_id, Kind::Status(status));
        message_id.clone_into(&mut inbound.id);
        inbound
    }

    /// A Messenger or Instagram delivery receipt for messages the bot sent: a `delivery`
    /// event with these `mids` and a `watermark` of now.
    ///
    /// # Panics
    ///
    /// If `channel` is WhatsApp (use [`status`](Self::status)).
    pub fn delivered(channel: Channel, user: &str, mids: &[&str]) -> Self {
        messaging_only(channel, "a delivery receipt");
        let mids = mids.iter().map(|m| (*m).to_owned()).collect();
        Self::new(channel, user, Kind::Delivered { mids })
    }

    /// A Messenger or Instagram read receipt: a `read` event; every message the bot sent
    /// before `watermark` (milliseconds since the epoch) has been read.
    ///
    /// # Panics
    ///
    /// If `channel` is WhatsApp (use [`status`](Self::status)).
    pub fn read(channel: Channel, user: &str, watermark: u64) -> Self {
        messaging_only(channel, "a read receipt");
        Self::new(channel, user, Kind::Read { watermark })
    }

    /// Any WhatsApp message: `message`'s fields (`type` and its object, `context`, ...) are
    /// added to `from`, a fresh `id` and `timestamp`, and replace them if given.
    ///
    /// # Panics
    ///
    /// If `message` is not a JSON object.
    pub fn whatsapp(wa_id: &str, message: Value) -> Self {
        let Value::Object(fields) = message else {
            panic!("Inbound::whatsapp takes a JSON object of message fields");
        };
        let mut inbound = Self::new(Channel::WhatsApp, wa_id, Kind::WhatsApp(Map::new()));
        if let Some(id) = fields.get("id").and_then(Value::as_str) {
            id.clone_into(&mut inbound.id);
        }
        inbound.kind = Kind::WhatsApp(fields);
        inbound
    }

    /// Any Messenger or Instagram messaging item: `item`'s fields (`message`, `postback`,
    /// `referral`, ...) are added to `sender`, `recipient` and `timestamp`, and replace them
    /// if given.
    ///
    /// # Panics
    ///
    /// If `channel` is WhatsApp (use [`whatsapp`](Self::whatsapp)) or `item` is not a JSON
    /// object.
    pub fn messaging(channel: Channel, user: &str, item: Value) -> Self {
        messaging_only(channel, "a messaging item");
        let Value::Object(fields) = item else {
            panic!("Inbound::messaging takes a JSON object of messaging item fields");
        };
        let mut inbound = Self::new(channel, user, Kind::Messaging(Map::new()));
        if let Some(mid) = fields.get("message").and_then(|m| m.get("mid")).and_then(Value::as_str)
        {
            mid.clone_into(&mut inbound.id);
        }
        inbound.kind = Kind::Messaging(fields);
        inbound
    }

    /// Quotes an earlier message: WhatsApp's `context` (`from` is who sent the quoted message,
    /// `id` its id), Messenger's `message.reply_to.mid`. Events that are not messages
    /// (postbacks, reactions on Messenger, receipts) ignore it.
    pub fn in_reply_to(mut self, message_id: &str) -> Self {
        self.reply_to = Some(message_id.to_owned());
        self
    }

    /// The WhatsApp user's profile name in `contacts[].profile.name`; `"User <wa_id>"` by
    /// default. Messenger and Instagram bodies carry no names.
    pub fn profile_name(mut self, name: &str) -> Self {
        self.profile_name = Some(name.to_owned());
        self
    }

    /// The channel.
    pub fn channel(&self) -> Channel {
        self.channel
    }

    /// The user: the `wa_id`, PSID or IGSID.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The id this item is known by, which [`GraphServer::deliver`](super::GraphServer::deliver)
    /// returns and [`Delivery::message_ids`](super::Delivery::message_ids) lists: a message's
    /// `id` or `mid` (`wamid.…` or `m_…`), a postback's `mid`; for a WhatsApp status the
    /// message it reports on. Messenger's reaction, delivery and read events carry no id of
    /// their own, so theirs appears nowhere in the body.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether this is something the user wrote (not a receipt), which opens WhatsApp's
    /// customer service window.
    pub(super) fn is_user_message(&self) -> bool {
        !matches!(self.kind, Kind::Status(_) | Kind::Delivered { .. } | Kind::Read { .. })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_follow_the_channel_and_raw_fields() {
        assert!(Inbound::text(Channel::WhatsApp, "1", "hi").id().starts_with("wamid."));
        assert!(Inbound::text(Channel::Instagram, "1", "hi").id().starts_with("m_"));
        assert_eq!(Inbound::status("1", "wamid.X", MessageStatus::Read).id(), "wamid.X");
        let raw = Inbound::whatsapp("1", json!({"id": "wamid.RAW", "type": "text"}));
        assert_eq!(raw.id(), "wamid.RAW");
        let raw = Inbound::messaging(Channel::Messenger, "1", json!({"message": {"mid": "m_R"}}));
        assert_eq!(raw.id(), "m_R");
        assert!(!Inbound::read(Channel::Messenger, "1", 5).is_user_message());
        assert!(Inbound::button(Channel::Messenger, "1", "p", "t").is_user_message());
    }

    #[test]
    #[should_panic(expected = "not WhatsApp's")]
    fn messaging_events_are_not_whatsapps() {
        let _ = Inbound::read(Channel::WhatsApp, "1", 5);
    }
}
