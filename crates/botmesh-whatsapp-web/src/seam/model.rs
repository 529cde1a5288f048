//! The messages that cross the seam: close to WhatsApp's own shapes (JIDs, stanza ids, quoted
//! keys), but owned here, so the provider's mapping never names a client library's types.

use botmesh_traits::Bytes;

/// A message's key: the chat, its stanza id, and in a group its author.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct WaKey {
    /// The chat's JID (`<number>@s.whatsapp.net`, `<id>@g.us`).
    pub chat: String,
    /// The stanza id.
    pub id: String,
    /// In a group, the author's JID; `None` in a one-to-one chat or for the bot's own.
    pub participant: Option<String>,
    /// Whether the bot sent it.
    pub from_me: bool,
}

impl WaKey {
    /// The key of message `id` in `chat`.
    pub fn new(chat: impl Into<String>, id: impl Into<String>) -> Self {
        Self { chat: chat.into(), id: id.into(), participant: None, from_me: false }
    }

    /// The same key, written by `participant` in a group.
    #[must_use]
    pub fn by(mut self, participant: impl Into<String>) -> Self {
        self.participant = Some(participant.into());
        self
    }

    /// The same key, for a message the bot sent.
    #[must_use]
    pub fn mine(mut self) -> Self {
        self.from_me = true;
        self
    }
}

/// A file a user sent, as the session describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaMedia {
    /// What the client needs to download it again (its URL, keys and hashes, encoded by the
    /// client); opaque to the provider.
    pub handle: String,
    /// Its MIME type.
    pub mime: Option<String>,
    /// Its size in bytes.
    pub size: Option<u64>,
    /// Its file name (documents).
    pub file_name: Option<String>,
}

impl WaMedia {
    /// A file the client finds again by `handle`.
    pub fn new(handle: impl Into<String>) -> Self {
        Self { handle: handle.into(), mime: None, size: None, file_name: None }
    }

    /// Sets the MIME type.
    #[must_use]
    pub fn with_mime(mut self, mime: impl Into<String>) -> Self {
        self.mime = Some(mime.into());
        self
    }

    /// Sets the size.
    #[must_use]
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }

    /// Sets the file name.
    #[must_use]
    pub fn with_file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name = Some(name.into());
        self
    }
}

/// A shared contact card.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaContact {
    /// The name shown.
    pub name: String,
    /// Its phone numbers.
    pub phones: Vec<String>,
    /// The WhatsApp id of the first number, when the card names one (`waid=`).
    pub wa_id: Option<String>,
}

impl WaContact {
    /// A card with a name and phone numbers.
    pub fn new(name: impl Into<String>, phones: Vec<String>) -> Self {
        Self { name: name.into(), phones, wa_id: None }
    }
}

/// The kind of a media message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaMediaKind {
    /// A picture.
    Image,
    /// A video.
    Video,
    /// A file.
    Document,
    /// A sticker.
    Sticker,
    /// An audio file.
    Audio,
    /// A voice note (push to talk).
    Voice,
}

/// What a message carries.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WaBody {
    /// Text (a plain or an extended text message).
    Text(String),
    /// A media message.
    Media {
        /// Which kind.
        kind: WaMediaKind,
        /// The file.
        media: WaMedia,
        /// Its caption.
        caption: Option<String>,
        /// Its length in seconds (audio, voice notes, videos).
        seconds: Option<u32>,
    },
    /// A location.
    Location {
        /// Latitude in degrees.
        latitude: f64,
        /// Longitude in degrees.
        longitude: f64,
        /// The place's name.
        name: Option<String>,
    },
    /// One or more contact cards.
    Contacts(Vec<WaContact>),
    /// A press of a button the bot offered.
    ButtonReply {
        /// The button's id.
        id: String,
        /// The text it showed.
        title: String,
    },
    /// A reaction, or its removal (`emoji: None`).
    Reaction {
        /// The message reacted to.
        to: WaKey,
        /// The emoji.
        emoji: Option<String>,
    },
    /// An edit of an earlier message.
    Edit {
        /// The message edited.
        of: WaKey,
        /// What it says now.
        body: Box<WaBody>,
    },
    /// Anything else.
    Other {
        /// What kind of message it is (`poll`, `protocol`, ...).
        kind: String,
        /// The message as the client renders it, for logs and for handlers that want it.
        raw: String,
    },
}

/// A message from a user.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WaIncoming {
    /// Its key; in a group, `participant` is the author.
    pub key: WaKey,
    /// The author's JID (the chat itself in a one-to-one chat).
    pub sender: String,
    /// The author's push name.
    pub push_name: Option<String>,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// What it carries.
    pub body: WaBody,
    /// The message it quotes, when it is a reply.
    pub quoted: Option<WaKey>,
}

impl WaIncoming {
    /// A message `id` from `sender` in `chat` (the same JID in a one-to-one chat).
    pub fn new(
        chat: impl Into<String>,
        id: impl Into<String>,
        sender: impl Into<String>,
        body: WaBody,
    ) -> Self {
        let (chat, sender) = (chat.into(), sender.into());
        let mut key = WaKey::new(chat.clone(), id);
        if chat != sender {
            key = key.by(sender.clone());
        }
        Self { key, sender, push_name: None, timestamp_ms: 0, body, quoted: None }
    }

    /// Sets the author's push name.
    #[must_use]
    pub fn with_push_name(mut self, name: impl Into<String>) -> Self {
        self.push_name = Some(name.into());
        self
    }

    /// Sets the send time.
    #[must_use]
    pub fn at(mut self, timestamp_ms: u64) -> Self {
        self.timestamp_ms = timestamp_ms;
        self
    }

    /// Marks it as a reply to `quoted`.
    #[must_use]
    pub fn quoting(mut self, quoted: WaKey) -> Self {
        self.quoted = Some(quoted);
        self
    }
}

/// Where the file of an outgoing media message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaFile {
    /// The bytes, uploaded by the client.
    Bytes {
        /// The file.
        data: Bytes,
        /// Its MIME type.
        mime: Option<String>,
        /// Its file name.
        file_name: Option<String>,
    },
    /// A URL the client fetches and uploads.
    Url(String),
}

/// A message the bot sends.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WaOutgoing {
    /// The chat's JID.
    pub chat: String,
    /// What it carries.
    pub body: WaOutgoingBody,
    /// The message it quotes.
    pub quoted: Option<WaKey>,
}

impl WaOutgoing {
    /// A message to `chat`.
    pub fn new(chat: impl Into<String>, body: WaOutgoingBody) -> Self {
        Self { chat: chat.into(), body, quoted: None }
    }

    /// The text it shows: the body or a caption.
    pub fn text(&self) -> Option<&str> {
        match &self.body {
            WaOutgoingBody::Text(t) => Some(t),
            WaOutgoingBody::Media { caption, .. } => caption.as_deref(),
            WaOutgoingBody::Location { name, .. } => name.as_deref(),
            WaOutgoingBody::Reaction { emoji, .. } => emoji.as_deref(),
        }
    }
}

/// What an outgoing message carries.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WaOutgoingBody {
    /// Text.
    Text(String),
    /// A media message.
    Media {
        /// Which kind; [`WaMediaKind::Voice`] is sent as a voice note.
        kind: WaMediaKind,
        /// The file.
        file: WaFile,
        /// Its caption (not for stickers, audio or voice notes).
        caption: Option<String>,
    },
    /// A location.
    Location {
        /// Latitude in degrees.
        latitude: f64,
        /// Longitude in degrees.
        longitude: f64,
        /// The place's name.
        name: Option<String>,
    },
    /// A reaction to a message, or its removal.
    Reaction {
        /// The message reacted to.
        to: WaKey,
        /// The emoji; `None` takes the reaction back.
        emoji: Option<String>,
    },
}

/// How far a sent message got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaReceiptKind {
    /// It reached the user's device.
    Delivered,
    /// The user read it (or played a voice note).
    Read,
}

/// A receipt for messages the bot sent to one chat.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaReceipt {
    /// The chat's JID.
    pub chat: String,
    /// The stanza ids of the messages.
    pub ids: Vec<String>,
    /// How far they got.
    pub kind: WaReceiptKind,
    /// When, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

impl WaReceipt {
    /// A receipt for `ids` in `chat`.
    pub fn new(chat: impl Into<String>, ids: Vec<String>, kind: WaReceiptKind) -> Self {
        Self { chat: chat.into(), ids, kind, timestamp_ms: 0 }
    }
}
