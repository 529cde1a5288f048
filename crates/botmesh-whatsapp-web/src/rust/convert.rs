//! whatsapp-rust's message protobufs (`wa::Message`) to the seam's model and back.
//!
//! Inbound, wrappers (ephemeral, view-once, device-sent, edited) are looked through; a media
//! message's download fields travel as its handle ([`handle`], read back by [`params`]), so
//! the bot can fetch the bytes later through the provider. Outbound, text, locations and
//! reactions are built here; media messages are built from an upload ([`media_message`]).

use whatsapp_rust::download::DownloadParams;
use whatsapp_rust::prelude::{Client, Jid, MessageExt, MessageField, MessageInfo, wa};
use whatsapp_rust::upload::UploadResponse;
use whatsapp_rust::wacore::download::MediaType;

use crate::seam::{WaBody, WaContact, WaIncoming, WaKey, WaMedia, WaMediaKind, WaOutgoingBody};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

fn media_type_name(kind: WaMediaKind) -> &'static str {
    match kind {
        WaMediaKind::Image => "image",
        WaMediaKind::Video => "video",
        WaMediaKind::Sticker => "sticker",
        WaMediaKind::Audio | WaMediaKind::Voice => "audio",
        WaMediaKind::Document => "document",
    }
}

/// What whatsapp-rust calls a kind of media.
pub(crate) fn media_type(kind: WaMediaKind) -> MediaType {
    match kind {
        WaMediaKind::Image => MediaType::Image,
        WaMediaKind::Video => MediaType::Video,
        WaMediaKind::Sticker => MediaType::Sticker,
        WaMediaKind::Audio | WaMediaKind::Voice => MediaType::Audio,
        WaMediaKind::Document => MediaType::Document,
    }
}

/// The download fields of a media message, written as one line of JSON.
struct Fields<'a> {
    kind: WaMediaKind,
    direct_path: Option<&'a str>,
    media_key: Option<&'a [u8]>,
    sha256: Option<&'a [u8]>,
    enc_sha256: Option<&'a [u8]>,
    length: Option<u64>,
}

/// The handle of a media message: what [`params`] reads back to download it.
fn handle(f: &Fields<'_>) -> String {
    serde_json::json!({
        "t": media_type_name(f.kind),
        "p": f.direct_path.unwrap_or_default(),
        "k": f.media_key.map(hex),
        "s": f.sha256.map(hex).unwrap_or_default(),
        "e": f.enc_sha256.map(hex),
        "n": f.length.unwrap_or(0),
    })
    .to_string()
}

/// The download parameters a handle names, or `None` when it is not one of ours.
pub(crate) fn params(handle: &str) -> Option<DownloadParams> {
    let v: serde_json::Value = serde_json::from_str(handle).ok()?;
    let media_type = match v.get("t")?.as_str()? {
        "image" => MediaType::Image,
        "video" => MediaType::Video,
        "sticker" => MediaType::Sticker,
        "audio" => MediaType::Audio,
        "document" => MediaType::Document,
        _ => return None,
    };
    let bytes = |k: &str| v.get(k).and_then(serde_json::Value::as_str).and_then(unhex);
    Some(DownloadParams {
        direct_path: v.get("p")?.as_str()?.to_owned(),
        media_key: bytes("k"),
        file_sha256: bytes("s")?,
        file_enc_sha256: bytes("e"),
        file_length: v.get("n")?.as_u64()?,
        media_type,
    })
}

fn media(f: &Fields<'_>, mime: Option<&String>, name: Option<&String>) -> WaMedia {
    let mut m = WaMedia::new(handle(f));
    m.mime = mime.cloned();
    m.size = f.length;
    m.file_name = name.cloned();
    m
}

/// The bot's own JIDs, by phone number and by LID, as the client knows them once paired.
#[derive(Debug, Clone, Default)]
pub(crate) struct Me {
    pn: Option<Jid>,
    lid: Option<Jid>,
}

impl Me {
    /// The JIDs of the device `client` runs.
    pub(crate) fn of(client: &Client) -> Self {
        Self::new(client.pn(), client.lid())
    }

    /// The bot known by `pn` and `lid`.
    pub(crate) fn new(pn: Option<Jid>, lid: Option<Jid>) -> Self {
        Self { pn: pn.map(|j| j.to_non_ad()), lid: lid.map(|j| j.to_non_ad()) }
    }

    /// Whether `jid` (any of its devices) is the bot.
    fn is(&self, jid: &Jid) -> bool {
        let jid = jid.to_non_ad();
        self.pn.as_ref() == Some(&jid) || self.lid.as_ref() == Some(&jid)
    }
}

/// Where a message was received: what the keys inside it (edits, reactions, quotes) are read
/// against. Those keys are written from the sender's side: `from_me` there means the sender.
pub(crate) struct Origin<'a> {
    /// The chat the message came in.
    pub(crate) chat: &'a str,
    /// Its sender.
    pub(crate) sender: Option<&'a Jid>,
    /// Whether the chat is a group.
    pub(crate) group: bool,
    /// The bot.
    pub(crate) me: &'a Me,
}

impl Origin<'_> {
    /// The key, as the bot names it, of the message `id` by `author` (`None`: not said).
    fn referenced(&self, author: Option<Jid>, id: &str) -> WaKey {
        let key = WaKey::new(self.chat, id);
        match author {
            Some(author) if self.me.is(&author) => key.mine(),
            Some(author) if self.group => key.by(author.to_non_ad().to_string()),
            _ => key,
        }
    }

    /// The key of a protobuf key written by the sender.
    fn key(&self, k: &wa::MessageKey) -> WaKey {
        let author = if k.from_me.unwrap_or(false) {
            self.sender.cloned()
        } else {
            k.participant.as_deref().or(k.remote_jid.as_deref()).and_then(|j| j.parse().ok())
        };
        self.referenced(author, k.id.as_deref().unwrap_or_default())
    }
}

/// A contact card's name, phones and WhatsApp id, read from its vCard.
fn contact(c: &wa::message::ContactMessage) -> WaContact {
    let mut phones = Vec::new();
    let mut wa_id = None;
    for line in c.vcard.as_deref().unwrap_or_default().lines() {
        let Some((head, value)) = line.split_once(':') else { continue };
        if head.to_ascii_uppercase().contains("TEL") {
            phones.push(value.trim().to_owned());
            if wa_id.is_none() {
                wa_id = head.split(';').find_map(|p| p.strip_prefix("waid=")).map(str::to_owned);
            }
        }
    }
    let mut card = WaContact::new(c.display_name.clone().unwrap_or_default(), phones);
    card.wa_id = wa_id;
    card
}

/// The context (quote) of a message, when it has one.
fn context(m: &wa::Message) -> Option<&wa::ContextInfo> {
    let m = m.get_base_message();
    [
        m.extended_text_message.as_option().and_then(|x| x.context_info.as_option()),
        m.image_message.as_option().and_then(|x| x.context_info.as_option()),
        m.video_message.as_option().and_then(|x| x.context_info.as_option()),
        m.audio_message.as_option().and_then(|x| x.context_info.as_option()),
        m.document_message.as_option().and_then(|x| x.context_info.as_option()),
        m.sticker_message.as_option().and_then(|x| x.context_info.as_option()),
        m.location_message.as_option().and_then(|x| x.context_info.as_option()),
        m.contact_message.as_option().and_then(|x| x.context_info.as_option()),
    ]
    .into_iter()
    .flatten()
    .next()
}

fn fields<'a>(
    kind: WaMediaKind,
    p: &'a Option<String>,
    k: &'a Option<Vec<u8>>,
    s: &'a Option<Vec<u8>>,
    e: &'a Option<Vec<u8>>,
    n: Option<u64>,
) -> Fields<'a> {
    Fields {
        kind,
        direct_path: p.as_deref(),
        media_key: k.as_deref(),
        sha256: s.as_deref(),
        enc_sha256: e.as_deref(),
        length: n,
    }
}

/// What a message carries; the keys in it are read as received at `at`.
pub(crate) fn body(message: &wa::Message, at: &Origin<'_>) -> WaBody {
    let m = message.get_base_message();
    if let Some(text) = m.conversation.as_deref() {
        return WaBody::Text(text.to_owned());
    }
    if let Some(x) = m.extended_text_message.as_option() {
        return WaBody::Text(x.text.clone().unwrap_or_default());
    }
    // Every media message carries the same download fields; only its kind, name, caption and
    // length differ.
    macro_rules! media_body {
        ($x:expr, $kind:expr, name: $name:expr, caption: $caption:expr, seconds: $seconds:expr) => {{
            let kind = $kind;
            let f = fields(
                kind,
                &$x.direct_path,
                &$x.media_key,
                &$x.file_sha256,
                &$x.file_enc_sha256,
                $x.file_length,
            );
            let media = media(&f, $x.mimetype.as_ref(), $name);
            WaBody::Media { kind, media, caption: $caption, seconds: $seconds }
        }};
    }
    if let Some(x) = m.image_message.as_option() {
        return media_body!(x, WaMediaKind::Image, name: None, caption: x.caption.clone(), seconds: None);
    }
    if let Some(x) = m.video_message.as_option() {
        return media_body!(x, WaMediaKind::Video, name: None, caption: x.caption.clone(), seconds: x.seconds);
    }
    if let Some(x) = m.audio_message.as_option() {
        let kind = if x.ptt.unwrap_or(false) { WaMediaKind::Voice } else { WaMediaKind::Audio };
        return media_body!(x, kind, name: None, caption: None, seconds: x.seconds);
    }
    if let Some(x) = m.document_message.as_option() {
        let name = x.file_name.as_ref();
        return media_body!(x, WaMediaKind::Document, name: name, caption: x.caption.clone(), seconds: None);
    }
    if let Some(x) = m.sticker_message.as_option() {
        return media_body!(x, WaMediaKind::Sticker, name: None, caption: None, seconds: None);
    }
    if let Some(x) = m.location_message.as_option() {
        return WaBody::Location {
            latitude: x.degrees_latitude.unwrap_or_default(),
            longitude: x.degrees_longitude.unwrap_or_default(),
            name: x.name.clone(),
        };
    }
    if let Some(x) = m.contact_message.as_option() {
        return WaBody::Contacts(vec![contact(x)]);
    }
    if let Some(x) = m.contacts_array_message.as_option() {
        return WaBody::Contacts(x.contacts.iter().map(contact).collect());
    }
    if let Some(x) = m.buttons_response_message.as_option() {
        let id = x.selected_button_id.clone().unwrap_or_default();
        let title = match &x.response {
            Some(wa::message::buttons_response_message::Response::SelectedDisplayText(t)) => {
                t.clone()
            }
            None => id.clone(),
        };
        return WaBody::ButtonReply { id, title };
    }
    if let Some(x) = m.reaction_message.as_option() {
        let to = x.key.as_option().map_or_else(|| WaKey::new(at.chat, ""), |k| at.key(k));
        let emoji = x.text.clone().filter(|t| !t.is_empty());
        return WaBody::Reaction { to, emoji };
    }
    if let Some(p) = m.protocol_message.as_option()
        && p.r#type == Some(wa::message::protocol_message::Type::MessageEdit)
        && let (Some(k), Some(edited)) = (p.key.as_option(), p.edited_message.as_option())
    {
        return WaBody::Edit { of: at.key(k), body: Box::new(body(edited, at)) };
    }
    let kind = if m.protocol_message.is_set() {
        "protocol"
    } else if m.poll_creation_message.is_set() || m.poll_creation_message_v3.is_set() {
        "poll"
    } else if m.poll_update_message.is_set() {
        "poll_vote"
    } else {
        "message"
    };
    // Only the kind: the message itself may hold keys (media keys, message secrets).
    WaBody::Other { kind: kind.to_owned(), raw: kind.to_owned() }
}

/// A received message in the seam's model; `me` is the bot, for the keys in it.
pub(crate) fn incoming(message: &wa::Message, info: &MessageInfo, me: &Me) -> WaIncoming {
    let chat = info.source.chat.to_string();
    // One member on several devices is one author.
    let sender = info.source.sender.to_non_ad().to_string();
    let at =
        Origin { chat: &chat, sender: Some(&info.source.sender), group: info.source.is_group, me };
    let body = body(message, &at);
    let mut m = WaIncoming::new(chat.clone(), info.id.clone(), sender.clone(), body);
    m.key.participant = info.source.is_group.then_some(sender);
    m.key.from_me = info.source.is_from_me;
    if !info.push_name.is_empty() {
        m.push_name = Some(info.push_name.clone());
    }
    m.timestamp_ms = u64::try_from(info.timestamp.timestamp_millis()).unwrap_or(0);
    if let Some(ctx) = context(message)
        && let Some(id) = &ctx.stanza_id
    {
        // A quote names its author (in one-to-one chats too), never whether it was the bot.
        let author = ctx.participant.as_deref().and_then(|j| j.parse().ok());
        m.quoted = Some(at.referenced(author, id));
    }
    m
}

/// The protobuf key of `key`.
pub(crate) fn wa_key(key: &WaKey) -> wa::MessageKey {
    wa::MessageKey {
        remote_jid: Some(key.chat.clone()),
        from_me: Some(key.from_me),
        id: Some(key.id.clone()),
        participant: key.participant.clone(),
    }
}

/// The quote of `quoted`, for a message's context.
pub(crate) fn quote(quoted: &WaKey) -> wa::ContextInfo {
    wa::ContextInfo {
        stanza_id: Some(quoted.id.clone()),
        participant: quoted.participant.clone(),
        // WhatsApp shows a quote with the quoted message's text; a placeholder keeps the link.
        quoted_message: MessageField::some(wa::Message {
            conversation: Some(String::new()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The message for an outgoing body that needs no upload: text, a location, a reaction.
/// `None` for media (see [`media_message`]).
pub(crate) fn message(body: &WaOutgoingBody, quoted: Option<&WaKey>) -> Option<wa::Message> {
    let context = || quoted.map(quote).map_or_else(MessageField::default, MessageField::some);
    match body {
        WaOutgoingBody::Text(text) if quoted.is_none() => {
            Some(wa::Message { conversation: Some(text.clone()), ..Default::default() })
        }
        WaOutgoingBody::Text(text) => Some(wa::Message {
            extended_text_message: MessageField::some(wa::message::ExtendedTextMessage {
                text: Some(text.clone()),
                context_info: context(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        WaOutgoingBody::Location { latitude, longitude, name } => Some(wa::Message {
            location_message: MessageField::some(wa::message::LocationMessage {
                degrees_latitude: Some(*latitude),
                degrees_longitude: Some(*longitude),
                name: name.clone(),
                context_info: context(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        WaOutgoingBody::Reaction { to, emoji } => Some(wa::Message {
            reaction_message: MessageField::some(wa::message::ReactionMessage {
                key: MessageField::some(wa_key(to)),
                // An empty reaction takes it back.
                text: Some(emoji.clone().unwrap_or_default()),
                sender_timestamp_ms: Some(chrono_now_ms()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        WaOutgoingBody::Media { .. } => None,
    }
}

fn chrono_now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Where an uploaded file lives, and its keys.
#[derive(Debug, Clone, Default)]
pub(crate) struct Uploaded {
    pub(crate) url: String,
    pub(crate) direct_path: String,
    pub(crate) media_key: Vec<u8>,
    pub(crate) file_enc_sha256: Vec<u8>,
    pub(crate) file_sha256: Vec<u8>,
    pub(crate) file_length: u64,
    pub(crate) media_key_timestamp: i64,
}

impl From<&UploadResponse> for Uploaded {
    fn from(up: &UploadResponse) -> Self {
        Self {
            url: up.url.clone(),
            direct_path: up.direct_path.clone(),
            media_key: up.media_key.to_vec(),
            file_enc_sha256: up.file_enc_sha256.to_vec(),
            file_sha256: up.file_sha256.to_vec(),
            file_length: up.file_length,
            media_key_timestamp: up.media_key_timestamp,
        }
    }
}

/// The media message for an uploaded file.
pub(crate) fn media_message(
    kind: WaMediaKind,
    up: &Uploaded,
    mime: &str,
    file_name: Option<&str>,
    caption: Option<&str>,
    quoted: Option<&WaKey>,
) -> wa::Message {
    let context = quoted.map(quote).map_or_else(MessageField::default, MessageField::some);
    let caption = caption.map(str::to_owned);
    let mime = Some(mime.to_owned());
    macro_rules! fields {
        ($t:ident { $($field:ident: $value:expr),* $(,)? }) => {
            wa::message::$t {
                url: Some(up.url.clone()),
                direct_path: Some(up.direct_path.clone()),
                media_key: Some(up.media_key.clone()),
                file_enc_sha256: Some(up.file_enc_sha256.clone()),
                file_sha256: Some(up.file_sha256.clone()),
                file_length: Some(up.file_length),
                media_key_timestamp: Some(up.media_key_timestamp),
                mimetype: mime,
                context_info: context,
                $($field: $value,)*
                ..Default::default()
            }
        };
    }
    let mut m = wa::Message::default();
    match kind {
        WaMediaKind::Image => {
            m.image_message = MessageField::some(fields!(ImageMessage { caption: caption.clone() }))
        }
        WaMediaKind::Video => {
            m.video_message = MessageField::some(fields!(VideoMessage { caption: caption.clone() }))
        }
        WaMediaKind::Sticker => m.sticker_message = MessageField::some(fields!(StickerMessage {})),
        WaMediaKind::Audio => {
            m.audio_message = MessageField::some(fields!(AudioMessage { ptt: Some(false) }))
        }
        WaMediaKind::Voice => {
            m.audio_message = MessageField::some(fields!(AudioMessage { ptt: Some(true) }))
        }
        WaMediaKind::Document => {
            m.document_message = MessageField::some(fields!(DocumentMessage {
                caption: caption.clone(),
                file_name: file_name.map(str::to_owned),
            }));
        }
    }
    m
}
