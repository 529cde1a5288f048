//! From Telegram updates to botmesh messages.
//!
//! Ids are chosen so that a redelivered update maps to the same message and two updates never
//! share one: a message is `<chat>:<message id>` (Telegram numbers messages per chat), an edit
//! `<chat>:<message id>:u<update id>`, a button press `cb:<callback query id>`, anything else
//! `u<update id>`. Business-account messages are not the bot's own chats: they arrive as
//! `Unsupported`. A chat in a forum topic is `<chat>#<thread>`, so that replies go back to the
//! topic; in groups the sender is the participant, so each member has a conversation.

use botmesh_traits::{Contact, Content, Inbound, Media, MediaKind, MessageId};
use teloxide_core::types::{
    CallbackQuery, Chat, InlineKeyboardButtonKind, MaybeInaccessibleMessage, Message, ReactionType,
    Update, UpdateKind, User,
};

/// A mapped update: the message for the bot, and the callback query to answer once it is
/// taken.
pub(crate) struct Mapped {
    pub(crate) inbound: Inbound,
    pub(crate) callback: Option<String>,
}

/// The chat id as botmesh names it: `<chat>` or `<chat>#<thread>`.
fn chat_name(chat: &Chat, thread: Option<i32>) -> String {
    match thread {
        Some(t) => format!("{}#{t}", chat.id.0),
        None => chat.id.0.to_string(),
    }
}

/// The id of message `id` of `chat`, as the bot sees it (and as replies name it).
pub(crate) fn message_id(chat: &Chat, id: i32) -> String {
    format!("{}:{id}", chat.id.0)
}

/// Maps one update. `username` is the bot's, stripped from `/command@username`.
pub(crate) fn map_update(provider: &str, username: Option<&str>, update: &Update) -> Mapped {
    let raw = || serde_json::to_string(update).unwrap_or_default();
    let (inbound, callback) = match &update.kind {
        UpdateKind::Message(m) => {
            let content = content(m, username).unwrap_or_else(|| unsupported("message", raw()));
            (from_message(provider, m, message_id(&m.chat, m.id.0), content), None)
        }
        UpdateKind::EditedMessage(m) => {
            let now = content(m, username).unwrap_or_else(|| unsupported("message", raw()));
            // Named by its update, which a redelivery keeps: two edits of one message are
            // two messages, whenever they were made.
            let id = format!("{}:u{}", message_id(&m.chat, m.id.0), update.id.0);
            let of = MessageId::from(message_id(&m.chat, m.id.0));
            let content = Content::Edit { of, content: Box::new(now) };
            (from_message(provider, m, id, content), None)
        }
        UpdateKind::CallbackQuery(q) => (pressed(provider, q), Some(q.id.0.clone())),
        UpdateKind::MessageReaction(r) => {
            // The user's reaction now: its first emoji, or none when they took it back.
            let emoji = r.new_reaction.iter().find_map(|t| match t {
                ReactionType::Emoji { emoji } => Some(emoji.clone()),
                _ => None,
            });
            let to = MessageId::from(message_id(&r.chat, r.message_id.0));
            let content = Content::Reaction { to, emoji };
            let id = format!("u{}", update.id.0);
            let inbound = Inbound::new(provider, id, chat_name(&r.chat, None), content);
            (with_sender(inbound, &r.chat, r.user()), None)
        }
        other => {
            let chat = update.chat().map_or_else(
                || update.from().map_or_else(|| "0".to_owned(), |u| u.id.0.to_string()),
                |c| c.id.0.to_string(),
            );
            let content = unsupported(kind_name(other), raw());
            (Inbound::new(provider, format!("u{}", update.id.0), chat, content), None)
        }
    };
    Mapped { inbound, callback }
}

fn unsupported(kind: &str, raw: String) -> Content {
    Content::Unsupported { kind: kind.to_owned(), raw }
}

fn kind_name(kind: &UpdateKind) -> &'static str {
    match kind {
        UpdateKind::ChannelPost(_) | UpdateKind::EditedChannelPost(_) => "channel_post",
        UpdateKind::BusinessMessage(_)
        | UpdateKind::EditedBusinessMessage(_)
        | UpdateKind::BusinessConnection(_)
        | UpdateKind::DeletedBusinessMessages(_) => "business",
        UpdateKind::MessageReactionCount(_) => "reaction_count",
        UpdateKind::InlineQuery(_) | UpdateKind::ChosenInlineResult(_) => "inline_query",
        UpdateKind::Poll(_) | UpdateKind::PollAnswer(_) => "poll",
        UpdateKind::MyChatMember(_) | UpdateKind::ChatMember(_) => "chat_member",
        UpdateKind::ChatJoinRequest(_) => "chat_join_request",
        _ => "update",
    }
}

/// The message's sender and chat around `content`.
fn from_message(provider: &str, m: &Message, id: String, content: Content) -> Inbound {
    let thread = m.thread_id.filter(|_| m.is_topic_message).map(|t| t.0.0);
    let mut inbound = Inbound::new(provider, id, chat_name(&m.chat, thread), content)
        .at(u64::try_from(m.date.timestamp_millis()).unwrap_or(0));
    if let Some(reply) = m.reply_to_message() {
        inbound = inbound.replying_to(message_id(&reply.chat, reply.id.0));
    }
    with_sender(inbound, &m.chat, m.from.as_ref())
}

fn with_sender(mut inbound: Inbound, chat: &Chat, from: Option<&User>) -> Inbound {
    if let Some(user) = from {
        inbound = inbound.with_sender_name(user.full_name());
        if let Some(lang) = &user.language_code {
            inbound = inbound.with_lang(lang.clone());
        }
        if !chat.is_private() {
            inbound = inbound.in_group(user.id.0.to_string());
        }
    }
    inbound
}

/// A press of an inline keyboard button: its callback data, titled as the button showed it.
fn pressed(provider: &str, q: &CallbackQuery) -> Inbound {
    let data = q.data.clone().unwrap_or_default();
    let message = q.message.as_ref();
    let title = message
        .and_then(MaybeInaccessibleMessage::regular_message)
        .and_then(Message::reply_markup)
        .and_then(|markup| {
            markup.inline_keyboard.iter().flatten().find_map(|b| match &b.kind {
                InlineKeyboardButtonKind::CallbackData(d) if *d == data => Some(b.text.clone()),
                _ => None,
            })
        })
        .unwrap_or_else(|| data.clone());
    let content = Content::Button { id: data, title };
    let id = format!("cb:{}", q.id.0);
    match message {
        Some(m) => {
            let chat = m.chat();
            let thread =
                m.regular_message().and_then(|r| r.thread_id.filter(|_| r.is_topic_message));
            let inbound =
                Inbound::new(provider, id, chat_name(chat, thread.map(|t| t.0.0)), content)
                    .replying_to(message_id(chat, m.id().0));
            with_sender(inbound, chat, Some(&q.from))
        }
        // A button on an inline message: no chat, the user is the conversation.
        None => Inbound::new(provider, id, q.from.id.0.to_string(), content)
            .with_sender_name(q.from.full_name()),
    }
}

/// What a message carries, or `None` when it is nothing botmesh maps.
fn content(m: &Message, username: Option<&str>) -> Option<Content> {
    let caption = m.caption().map(str::to_owned);
    let media = |kind, media| Some(Content::Media { kind, media, caption: caption.clone() });
    if let Some(text) = m.text() {
        return Some(Content::text(strip_username(text, username)));
    }
    if let Some(photo) = m.photo().and_then(|sizes| sizes.iter().max_by_key(|p| p.width * p.height))
    {
        return media(MediaKind::Image, file(&photo.file.id.0, photo.file.size, None, None));
    }
    if let Some(v) = m.voice() {
        let media =
            file(&v.file.id.0, v.file.size, v.mime_type.as_ref().map(ToString::to_string), None);
        return Some(Content::Voice { media, seconds: Some(v.duration.seconds()) });
    }
    if let Some(d) = m.document() {
        let mime = d.mime_type.as_ref().map(ToString::to_string);
        return media(
            MediaKind::Document,
            file(&d.file.id.0, d.file.size, mime, d.file_name.clone()),
        );
    }
    if let Some(v) = m.video() {
        let mime = v.mime_type.as_ref().map(ToString::to_string);
        return media(MediaKind::Video, file(&v.file.id.0, v.file.size, mime, v.file_name.clone()));
    }
    if let Some(a) = m.audio() {
        let mime = a.mime_type.as_ref().map(ToString::to_string);
        return media(MediaKind::Audio, file(&a.file.id.0, a.file.size, mime, a.file_name.clone()));
    }
    if let Some(s) = m.sticker() {
        return media(MediaKind::Sticker, file(&s.file.id.0, s.file.size, None, None));
    }
    if let Some(l) = m.location() {
        return Some(Content::Location {
            latitude: l.latitude,
            longitude: l.longitude,
            name: None,
        });
    }
    if let Some(c) = m.contact() {
        let name = match &c.last_name {
            Some(last) => format!("{} {last}", c.first_name),
            None => c.first_name.clone(),
        };
        let mut contact = Contact::new(name).with_phone(c.phone_number.clone());
        if let Some(user) = c.user_id {
            contact = contact.with_user_id(user.0.to_string());
        }
        return Some(Content::Contacts { contacts: vec![contact] });
    }
    None
}

/// A file Telegram holds, by its file id.
fn file(id: &str, size: u32, mime: Option<String>, name: Option<String>) -> Media {
    let mut media = Media::new(id);
    if size != u32::MAX {
        media = media.with_size(u64::from(size));
    }
    if let Some(mime) = mime {
        media = media.with_mime(mime);
    }
    if let Some(name) = name {
        media = media.with_file_name(name);
    }
    media
}

/// `/start@shop_bot now` → `/start now` when the bot is `shop_bot`.
fn strip_username(text: &str, username: Option<&str>) -> String {
    let (Some(username), Some(rest)) = (username, text.strip_prefix('/')) else {
        return text.to_owned();
    };
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (command, tail) = rest.split_at(end);
    match command.split_once('@') {
        Some((name, to)) if to.eq_ignore_ascii_case(username) => format!("/{name}{tail}"),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_addressed_to_this_bot_loses_the_username_and_others_keep_it() {
        assert_eq!(strip_username("/start@Shop_Bot now", Some("shop_bot")), "/start now");
        assert_eq!(strip_username("/start@other_bot", Some("shop_bot")), "/start@other_bot");
        assert_eq!(strip_username("/help", Some("shop_bot")), "/help");
        assert_eq!(strip_username("hi @shop_bot", Some("shop_bot")), "hi @shop_bot");
    }
}
