//! Gateway events as botmesh messages.
//!
//! In a guild channel the author is the participant, so each member has a conversation of
//! their own; a DM is a one-to-one chat. A thread is a channel of its own, so its messages
//! (and the replies to them) stay in it. The chat is always the channel id, which is where
//! replies go.

use botmesh_traits::{Content, Inbound, Media, MediaKind};
use serenity::model::application::{
    ActionRowComponent, ButtonKind, CommandDataOption, CommandDataOptionValue,
    ComponentInteraction, ComponentInteractionDataKind, Interaction,
};
use serenity::model::channel::{Attachment, Message, MessageFlags, Reaction, ReactionType};
use serenity::model::event::{Event, MessageUpdateEvent};
use serenity::model::id::InteractionId;
use serenity::model::user::User;

/// Discord's epoch (2015-01-01) in milliseconds since the Unix epoch.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// An interaction Discord waits for an answer to, within 3 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ack {
    /// A button press: answered "deferred update" (type 6), the message stays as it is.
    Component { id: InteractionId, token: String },
    /// A slash command: answered with a message only its user sees (type 4, ephemeral),
    /// repeating the command, since the bot's answer comes as a message of the channel.
    Command { id: InteractionId, token: String, text: String },
}

/// What one gateway event brings: the messages for the bot, and the interaction to answer.
#[derive(Debug, Default)]
pub(crate) struct Arrival {
    pub(crate) messages: Vec<Inbound>,
    pub(crate) ack: Option<Ack>,
}

/// When a snowflake was made, in milliseconds since the Unix epoch.
pub(crate) fn snowflake_ms(id: u64) -> u64 {
    (id >> 22) + DISCORD_EPOCH_MS
}

/// Maps one dispatch. `me` is the bot's own user id, whose messages and reactions are skipped.
pub(crate) fn map_event(provider: &str, me: Option<u64>, event: &Event) -> Arrival {
    match event {
        Event::MessageCreate(e) => {
            Arrival { messages: map_message(provider, me, &e.message), ack: None }
        }
        Event::MessageUpdate(e) => {
            Arrival { messages: map_edit(provider, me, e).into_iter().collect(), ack: None }
        }
        Event::InteractionCreate(e) => map_interaction(provider, &e.interaction),
        Event::ReactionAdd(e) => Arrival {
            messages: map_reaction(provider, me, &e.reaction, true).into_iter().collect(),
            ack: None,
        },
        Event::ReactionRemove(e) => Arrival {
            messages: map_reaction(provider, me, &e.reaction, false).into_iter().collect(),
            ack: None,
        },
        _ => Arrival::default(),
    }
}

fn display_name(user: &User) -> String {
    user.global_name.clone().unwrap_or_else(|| user.name.clone())
}

/// The text with a leading mention of the bot (`<@id>` or `<@!id>`) taken off, so that
/// "@bot hello" reads "hello". Other mentions stay as Discord writes them (`<@id>`, `<#id>`,
/// `<@&id>`).
pub(crate) fn strip_own_mention(text: &str, me: Option<u64>) -> String {
    let Some(me) = me else { return text.to_owned() };
    for mention in [format!("<@{me}>"), format!("<@!{me}>")] {
        if let Some(rest) = text.trim_start().strip_prefix(&mention) {
            return rest.trim_start().to_owned();
        }
    }
    text.to_owned()
}

/// The kind of media an attachment is, by its MIME type.
fn kind_of(mime: Option<&str>) -> MediaKind {
    match mime.and_then(|m| m.split('/').next()) {
        Some("image") => MediaKind::Image,
        Some("video") => MediaKind::Video,
        Some("audio") => MediaKind::Audio,
        _ => MediaKind::Document,
    }
}

fn media_of(a: &Attachment) -> Media {
    let mut media = Media::new(a.url.clone()).with_file_name(a.filename.clone());
    media = media.with_size(u64::from(a.size));
    if let Some(mime) = &a.content_type {
        media = media.with_mime(mime.clone());
    }
    media
}

/// A message a user wrote: one `Inbound` per attachment (the text is the first one's
/// caption), or one for its text.
pub(crate) fn map_message(provider: &str, me: Option<u64>, m: &Message) -> Vec<Inbound> {
    if me == Some(m.author.id.get()) {
        return Vec::new();
    }
    let chat = m.channel_id.get().to_string();
    let text = strip_own_mention(&m.content, me);
    let make = |id: String, content: Content| {
        let mut i = Inbound::new(provider, id, chat.as_str(), content)
            .at(snowflake_ms(m.id.get()))
            .with_sender_name(display_name(&m.author));
        if m.guild_id.is_some() {
            i = i.in_group(m.author.id.get().to_string());
        }
        if let Some(to) = m.message_reference.as_ref().and_then(|r| r.message_id) {
            i = i.replying_to(to.get().to_string());
        }
        i
    };
    let id = m.id.get().to_string();
    if !m.attachments.is_empty() {
        let voice = m.flags.is_some_and(|f| f.contains(MessageFlags::IS_VOICE_MESSAGE));
        return m
            .attachments
            .iter()
            .enumerate()
            .map(|(n, a)| {
                let id = if n == 0 { id.clone() } else { format!("{id}#{n}") };
                let caption = (n == 0 && !text.is_empty()).then(|| text.clone());
                let content = if voice {
                    let seconds = a.duration_secs.map(|s| s.round().clamp(0.0, 86_400.0) as u32);
                    Content::Voice { media: media_of(a), seconds }
                } else {
                    Content::Media {
                        kind: kind_of(a.content_type.as_deref()),
                        media: media_of(a),
                        caption,
                    }
                };
                make(id, content)
            })
            .collect();
    }
    if let Some(sticker) = m.sticker_items.first() {
        let url = format!("https://media.discordapp.net/stickers/{}.png", sticker.id.get());
        let media = Media::new(url).with_file_name(sticker.name.clone());
        return vec![make(id, Content::Media { kind: MediaKind::Sticker, media, caption: None })];
    }
    if text.is_empty() {
        // A system message, a poll, an embed only: kept whole.
        let raw = serde_json::to_string(m).unwrap_or_default();
        return vec![make(id, Content::Unsupported { kind: "message".into(), raw })];
    }
    vec![make(id, Content::text(text))]
}

/// An edited message: its new text, named by the edit's time so that two edits are two
/// messages.
fn map_edit(provider: &str, me: Option<u64>, e: &MessageUpdateEvent) -> Option<Inbound> {
    let author = e.author.as_ref()?;
    let content = e.content.as_ref()?;
    if me == Some(author.id.get()) {
        return None;
    }
    let at = e.edited_timestamp.map_or(0, |t| t.unix_timestamp());
    let of = e.id.get().to_string();
    let content = Content::Edit {
        of: of.as_str().into(),
        content: Box::new(Content::text(strip_own_mention(content, me))),
    };
    let ms = u64::try_from(at).unwrap_or(0).saturating_mul(1000);
    let mut i =
        Inbound::new(provider, format!("{of}:edit:{at}"), e.channel_id.get().to_string(), content)
            .at(ms)
            .with_sender_name(display_name(author));
    if e.guild_id.is_some() {
        i = i.in_group(author.id.get().to_string());
    }
    Some(i)
}

/// The label of the button `custom_id` on the message it was pressed on.
fn button_label(ci: &ComponentInteraction, custom_id: &str) -> Option<String> {
    ci.message.components.iter().flat_map(|row| &row.components).find_map(|c| match c {
        ActionRowComponent::Button(b) => match &b.data {
            ButtonKind::NonLink { custom_id: id, .. } if id == custom_id => b.label.clone(),
            _ => None,
        },
        _ => None,
    })
}

/// A command option as text: a value, a mention, or a subcommand with its own options.
fn option_text(o: &CommandDataOption) -> String {
    match &o.value {
        CommandDataOptionValue::String(s) => s.clone(),
        CommandDataOptionValue::Integer(n) => n.to_string(),
        CommandDataOptionValue::Number(n) => n.to_string(),
        CommandDataOptionValue::Boolean(b) => b.to_string(),
        CommandDataOptionValue::User(id) => format!("<@{}>", id.get()),
        CommandDataOptionValue::Channel(id) => format!("<#{}>", id.get()),
        CommandDataOptionValue::Role(id) => format!("<@&{}>", id.get()),
        CommandDataOptionValue::Mentionable(id) => id.get().to_string(),
        CommandDataOptionValue::Attachment(id) => id.get().to_string(),
        CommandDataOptionValue::SubCommand(opts)
        | CommandDataOptionValue::SubCommandGroup(opts) => std::iter::once(o.name.clone())
            .chain(opts.iter().map(option_text))
            .collect::<Vec<_>>()
            .join(" "),
        CommandDataOptionValue::Autocomplete { value, .. } => value.clone(),
        _ => String::new(),
    }
}

fn map_interaction(provider: &str, interaction: &Interaction) -> Arrival {
    match interaction {
        Interaction::Component(ci) => {
            let (id, title) = match &ci.data.kind {
                ComponentInteractionDataKind::Button => {
                    let id = ci.data.custom_id.clone();
                    let title = button_label(ci, &id).unwrap_or_else(|| id.clone());
                    (id, title)
                }
                ComponentInteractionDataKind::StringSelect { values } => {
                    let value = values.first().cloned().unwrap_or_default();
                    (value.clone(), value)
                }
                _ => (ci.data.custom_id.clone(), ci.data.custom_id.clone()),
            };
            let mut i = Inbound::new(
                provider,
                ci.id.get().to_string(),
                ci.channel_id.get().to_string(),
                Content::Button { id, title },
            )
            .at(snowflake_ms(ci.id.get()))
            .with_sender_name(display_name(&ci.user))
            .with_lang(ci.locale.clone())
            .replying_to(ci.message.id.get().to_string());
            if ci.guild_id.is_some() {
                i = i.in_group(ci.user.id.get().to_string());
            }
            let ack = Ack::Component { id: ci.id, token: ci.token.clone() };
            Arrival { messages: vec![i], ack: Some(ack) }
        }
        Interaction::Command(cmd) => {
            let args: Vec<String> = cmd.data.options.iter().map(option_text).collect();
            let text = std::iter::once(format!("/{}", cmd.data.name))
                .chain(args.into_iter().filter(|a| !a.is_empty()))
                .collect::<Vec<_>>()
                .join(" ");
            let mut i = Inbound::new(
                provider,
                cmd.id.get().to_string(),
                cmd.channel_id.get().to_string(),
                Content::text(text.clone()),
            )
            .at(snowflake_ms(cmd.id.get()))
            .with_sender_name(display_name(&cmd.user))
            .with_lang(cmd.locale.clone());
            if cmd.guild_id.is_some() {
                i = i.in_group(cmd.user.id.get().to_string());
            }
            let ack = Ack::Command { id: cmd.id, token: cmd.token.clone(), text };
            Arrival { messages: vec![i], ack: Some(ack) }
        }
        _ => Arrival::default(),
    }
}

/// The emoji of a reaction as text: the character, or a custom emoji's name.
pub(crate) fn emoji_text(emoji: &ReactionType) -> String {
    match emoji {
        ReactionType::Unicode(s) => s.clone(),
        ReactionType::Custom { name, id, .. } => {
            name.clone().unwrap_or_else(|| id.get().to_string())
        }
        _ => String::new(),
    }
}

fn map_reaction(provider: &str, me: Option<u64>, r: &Reaction, added: bool) -> Option<Inbound> {
    let user = r.user_id?.get();
    if me == Some(user) {
        return None;
    }
    let emoji = emoji_text(&r.emoji);
    let message = r.message_id.get().to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    // Discord gives a reaction no id; the time keeps an add after a remove a message of its own.
    let sign = if added { "+" } else { "-" };
    let id = format!("{message}:{user}:{emoji}:{sign}{now}");
    let content = Content::Reaction { to: message.as_str().into(), emoji: added.then_some(emoji) };
    let mut i = Inbound::new(provider, id, r.channel_id.get().to_string(), content).at(now);
    if r.guild_id.is_some() {
        i = i.in_group(user.to_string());
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ME: u64 = 900;

    fn user(id: u64, name: &str) -> Value {
        json!({"id": id.to_string(), "username": name, "global_name": null, "avatar": null})
    }

    fn message(id: u64, author: u64, guild: Option<u64>, content: &str) -> Value {
        let mut m = json!({
            "id": id.to_string(), "channel_id": "7", "author": user(author, "ana"),
            "content": content, "timestamp": "2021-01-01T00:00:00.000Z", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if let Some(g) = guild {
            m["guild_id"] = json!(g.to_string());
        }
        m
    }

    fn event(t: &str, d: Value) -> Event {
        serde_json::from_value(json!({"t": t, "d": d})).unwrap()
    }

    fn map(t: &str, d: Value) -> Arrival {
        map_event("discord", Some(ME), &event(t, d))
    }

    #[test]
    fn a_guild_message_is_per_member_keeps_its_reply_and_loses_the_bot_s_mention() {
        let id = (1000 << 22) | 5;
        let mut m = message(id, 11, Some(500), "<@900>  hello <@12>");
        m["message_reference"] = json!({"message_id": "41", "channel_id": "7"});
        let arrival = map("MESSAGE_CREATE", m);
        let [inbound] = arrival.messages.as_slice() else { panic!("{arrival:?}") };
        assert_eq!(inbound.content, Content::text("hello <@12>"));
        assert_eq!(inbound.key().as_str(), "discord:7/11");
        assert_eq!(inbound.reply_to.as_ref().map(|r| r.as_str()), Some("41"));
        assert_eq!(inbound.timestamp_ms, DISCORD_EPOCH_MS + 1000);
        assert_eq!(inbound.sender_name.as_deref(), Some("ana"));
        assert!(arrival.ack.is_none());
    }

    #[test]
    fn a_dm_is_one_to_one_and_the_bot_s_own_messages_are_skipped() {
        let dm = map("MESSAGE_CREATE", message(1 << 22, 11, None, "hi"));
        assert_eq!(dm.messages[0].key().as_str(), "discord:7");
        assert!(map("MESSAGE_CREATE", message(1 << 22, ME, None, "mine")).messages.is_empty());
    }

    #[test]
    fn each_attachment_is_a_message_and_the_text_is_the_first_one_s_caption() {
        let mut m = message(1 << 22, 11, None, "look");
        m["attachments"] = json!([
            {"id": "1", "filename": "a.png", "size": 3, "url": "https://cdn/a.png", "proxy_url": "x", "content_type": "image/png"},
            {"id": "2", "filename": "b.pdf", "size": 4, "url": "https://cdn/b.pdf", "proxy_url": "x"},
        ]);
        let messages = map("MESSAGE_CREATE", m).messages;
        let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["4194304", "4194304#1"]);
        let Content::Media { kind, media, caption } = &messages[0].content else { panic!() };
        assert_eq!(
            (*kind, media.url.as_str(), caption.as_deref()),
            (MediaKind::Image, "https://cdn/a.png", Some("look"))
        );
        assert_eq!((media.mime.as_deref(), media.size), (Some("image/png"), Some(3)));
        let Content::Media { kind, caption, .. } = &messages[1].content else { panic!() };
        assert_eq!((*kind, caption.as_deref()), (MediaKind::Document, None));
    }

    #[test]
    fn a_voice_message_is_a_voice_note_and_an_empty_message_is_kept_whole() {
        let mut m = message(1 << 22, 11, None, "");
        m["flags"] = json!(1 << 13);
        m["attachments"] = json!([{"id": "1", "filename": "voice.ogg", "size": 9, "url": "u", "proxy_url": "u", "duration_secs": 3.4}]);
        let voice = map("MESSAGE_CREATE", m).messages.remove(0);
        assert!(matches!(voice.content, Content::Voice { seconds: Some(3), .. }), "{voice:?}");
        let empty = map("MESSAGE_CREATE", message(1 << 22, 11, None, "")).messages.remove(0);
        assert!(
            matches!(empty.content, Content::Unsupported { ref kind, .. } if kind == "message")
        );
    }

    fn interaction(kind: u8, data: Value, guild: bool) -> Value {
        let mut i = json!({
            "id": "77", "application_id": "1", "type": kind, "channel_id": "7",
            "user": user(11, "ana"), "token": "tok", "version": 1, "locale": "es-ES",
            "entitlements": [], "attachment_size_limit": 1, "data": data,
            "message": {
                "id": "55", "channel_id": "7", "author": user(ME, "bot"), "content": "Sure?",
                "timestamp": "2021-01-01T00:00:00.000Z", "edited_timestamp": null, "tts": false,
                "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": false, "type": 0,
                "components": [{"type": 1, "components": [
                    {"type": 2, "style": 1, "custom_id": "yes", "label": "Yes please"},
                    {"type": 2, "style": 1, "custom_id": "no", "label": "No"},
                ]}],
            },
        });
        if guild {
            i["guild_id"] = json!("500");
        }
        i
    }

    #[test]
    fn a_button_press_is_a_button_with_its_label_and_is_acknowledged() {
        let arrival = map(
            "INTERACTION_CREATE",
            interaction(3, json!({"custom_id": "yes", "component_type": 2}), true),
        );
        let [press] = arrival.messages.as_slice() else { panic!("{arrival:?}") };
        assert_eq!(press.content, Content::Button { id: "yes".into(), title: "Yes please".into() });
        assert_eq!((press.key().as_str(), press.lang.as_deref()), ("discord:7/11", Some("es-ES")));
        assert_eq!(press.reply_to.as_ref().map(|r| r.as_str()), Some("55"));
        assert_eq!(
            arrival.ack,
            Some(Ack::Component { id: InteractionId::new(77), token: "tok".into() })
        );
        let select = json!({"custom_id": "menu", "component_type": 3, "values": ["tea"]});
        let picked = map("INTERACTION_CREATE", interaction(3, select, false)).messages.remove(0);
        assert_eq!(picked.content, Content::Button { id: "tea".into(), title: "tea".into() });
    }

    #[test]
    fn a_slash_command_is_a_text_with_its_arguments() {
        let data = json!({"id": "9", "name": "order", "type": 1, "options": [
            {"name": "add", "type": 1, "options": [
                {"name": "item", "type": 3, "value": "tea"},
                {"name": "count", "type": 4, "value": 2},
                {"name": "for", "type": 6, "value": "12"},
            ]},
        ]});
        let arrival = map("INTERACTION_CREATE", interaction(2, data, false));
        let text = "/order add tea 2 <@12>";
        assert_eq!(arrival.messages[0].content, Content::text(text));
        assert_eq!(
            arrival.ack,
            Some(Ack::Command {
                id: InteractionId::new(77),
                token: "tok".into(),
                text: text.into()
            })
        );
    }

    #[test]
    fn reactions_come_and_go_and_the_bot_s_own_are_skipped() {
        let reaction = |user: u64| {
            json!({
                "user_id": user.to_string(), "channel_id": "7", "message_id": "55", "guild_id": "500",
                "emoji": {"id": null, "name": "👍"}, "burst": false, "type": 0,
            })
        };
        let added = map("MESSAGE_REACTION_ADD", reaction(11)).messages.remove(0);
        assert_eq!(added.content, Content::Reaction { to: "55".into(), emoji: Some("👍".into()) });
        assert_eq!(added.key().as_str(), "discord:7/11");
        let removed = map("MESSAGE_REACTION_REMOVE", reaction(11)).messages.remove(0);
        assert_eq!(removed.content, Content::Reaction { to: "55".into(), emoji: None });
        assert_ne!(added.id, removed.id);
        assert!(map("MESSAGE_REACTION_ADD", reaction(ME)).messages.is_empty());
    }

    #[test]
    fn an_edit_carries_the_new_text_and_is_named_by_its_time() {
        let edit = json!({
            "id": "55", "channel_id": "7", "author": user(11, "ana"), "content": "fixed",
            "edited_timestamp": "2021-01-01T00:00:05.000Z",
        });
        let edited = map("MESSAGE_UPDATE", edit).messages.remove(0);
        let Content::Edit { of, content } = &edited.content else { panic!("{edited:?}") };
        assert_eq!((of.as_str(), content.as_text()), ("55", Some("fixed")));
        assert_eq!(edited.id.as_str(), "55:edit:1609459205");
    }
}
