//! From botmesh messages to Bot API calls.

use botmesh_traits::{Error, MediaKind, MediaSource, Outbound, OutboundContent};
use teloxide_core::Bot;
use teloxide_core::RequestError;
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{HasPayload, Request, Requester};
use teloxide_core::types::{
    ChatId, FileId, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, Message,
    MessageId as TgMessageId, ParseMode, ReactionType, ReplyParameters, ThreadId,
};

/// Where a message goes: the chat, and the forum topic when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) chat: ChatId,
    pub(crate) thread: Option<ThreadId>,
}

/// Reads `<chat>` or `<chat>#<thread>` (see `inbound.rs`).
pub(crate) fn target(chat: &str) -> Result<Target, Error> {
    let bad = || Error::InvalidInput { reason: format!("{chat:?} is not a Telegram chat id") };
    let (chat, thread) = match chat.split_once('#') {
        Some((chat, thread)) => (chat, Some(thread.parse::<i32>().map_err(|_| bad())?)),
        None => (chat, None),
    };
    let chat = ChatId(chat.parse::<i64>().map_err(|_| bad())?);
    Ok(Target { chat, thread: thread.map(|t| ThreadId(TgMessageId(t))) })
}

/// The message number in a botmesh message id (`<chat>:<message>`, see `inbound.rs`).
fn message_number(id: &str) -> Option<TgMessageId> {
    id.split(':').nth(1).and_then(|n| n.parse().ok()).map(TgMessageId)
}

/// A file to send: a URL, a file id Telegram already holds, or bytes to upload.
fn input_file(source: &MediaSource) -> Result<InputFile, Error> {
    match source {
        MediaSource::Url { url } if url.starts_with("http://") || url.starts_with("https://") => {
            let parsed = url::Url::parse(url).map_err(|e| Error::InvalidInput {
                reason: format!("a media URL that does not parse: {e}"),
            })?;
            Ok(InputFile::url(parsed))
        }
        MediaSource::Url { url } => Ok(InputFile::file_id(FileId(url.clone()))),
        MediaSource::Bytes { data, file_name, .. } => {
            let file = InputFile::memory(data.clone());
            Ok(match file_name {
                Some(name) => file.file_name(name.clone()),
                None => file,
            })
        }
        _ => Err(Error::Unsupported { op: "this media source on Telegram" }),
    }
}

/// Why a send failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The message cannot be sent as it is (a chat id that is not one, unsupported content).
    Refused(Error),
    /// Telegram answered with an error, or could not be reached.
    Platform(RequestError),
}

/// Sends `message` and returns the message Telegram made of it (`None` for a reaction, which
/// makes none).
pub(crate) async fn send(
    bot: &Bot,
    parse_mode: Option<ParseMode>,
    message: &Outbound,
) -> Result<Option<Message>, Failure> {
    let to = target(message.chat.as_str()).map_err(Failure::Refused)?;
    let reply = message.reply_to.as_ref().and_then(|id| message_number(id.as_str()));
    let reply = reply.map(|id| ReplyParameters::new(id).allow_sending_without_reply());
    let sent = match &message.content {
        OutboundContent::Text { body } => {
            let mut req = bot.send_message(to.chat, body.clone());
            req = req.with_payload_mut(|p| {
                p.message_thread_id = to.thread;
                p.parse_mode = parse_mode;
                p.reply_parameters = reply;
            });
            req.send().await
        }
        OutboundContent::Buttons { body, buttons } => {
            let rows = buttons
                .iter()
                .map(|b| vec![InlineKeyboardButton::callback(b.title.clone(), b.id.clone())]);
            let mut req = bot
                .send_message(to.chat, body.clone())
                .reply_markup(InlineKeyboardMarkup::new(rows));
            req = req.with_payload_mut(|p| {
                p.message_thread_id = to.thread;
                p.parse_mode = parse_mode;
                p.reply_parameters = reply;
            });
            req.send().await
        }
        OutboundContent::Media { kind, source, caption } => {
            let file = input_file(source).map_err(Failure::Refused)?;
            send_media(bot, to, *kind, file, caption.clone(), parse_mode, reply).await
        }
        OutboundContent::Location { latitude, longitude, .. } => {
            let mut req = bot.send_location(to.chat, *latitude, *longitude);
            req = req.with_payload_mut(|p| {
                p.message_thread_id = to.thread;
                p.reply_parameters = reply;
            });
            req.send().await
        }
        OutboundContent::Reaction { to: of, emoji } => {
            let Some(id) = message_number(of.as_str()) else {
                let reason = format!("{of} is not a Telegram message id");
                return Err(Failure::Refused(Error::InvalidInput { reason }));
            };
            let reaction: Vec<ReactionType> =
                emoji.iter().map(|e| ReactionType::Emoji { emoji: e.clone() }).collect();
            let set = bot.set_message_reaction(to.chat, id).reaction(reaction).send().await;
            return set.map(|_| None).map_err(Failure::Platform);
        }
        _ => return Err(Failure::Refused(Error::Unsupported { op: "this content on Telegram" })),
    };
    sent.map(Some).map_err(Failure::Platform)
}

async fn send_media(
    bot: &Bot,
    to: Target,
    kind: MediaKind,
    file: InputFile,
    caption: Option<String>,
    parse_mode: Option<ParseMode>,
    reply: Option<ReplyParameters>,
) -> Result<Message, RequestError> {
    macro_rules! with_caption {
        ($req:expr) => {
            $req.with_payload_mut(|p| {
                p.message_thread_id = to.thread;
                p.caption = caption;
                p.parse_mode = parse_mode;
                p.reply_parameters = reply;
            })
            .send()
            .await
        };
    }
    match kind {
        MediaKind::Image => with_caption!(bot.send_photo(to.chat, file)),
        MediaKind::Video => with_caption!(bot.send_video(to.chat, file)),
        MediaKind::Audio => with_caption!(bot.send_audio(to.chat, file)),
        MediaKind::Sticker => {
            bot.send_sticker(to.chat, file)
                .with_payload_mut(|p| {
                    p.message_thread_id = to.thread;
                    p.reply_parameters = reply;
                })
                .send()
                .await
        }
        _ => with_caption!(bot.send_document(to.chat, file)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_names_its_topic_after_a_hash_and_garbage_is_refused() {
        let t = target("-1001#7").unwrap();
        assert_eq!((t.chat, t.thread), (ChatId(-1001), Some(ThreadId(TgMessageId(7)))));
        assert_eq!(target("42").unwrap().thread, None);
        assert!(target("ana").is_err());
        assert!(target("1#x").is_err());
    }

    #[test]
    fn a_reply_names_the_message_number_after_the_chat() {
        assert_eq!(message_number("-1001:55"), Some(TgMessageId(55)));
        assert_eq!(message_number("cb:abc"), None);
    }
}
