//! The Bot API methods the stand-in implements, matched by name case-insensitively (teloxide
//! sends `GetUpdates`, the documentation says `getUpdates`), and those that send messages,
//! answer callback queries and hand out files.

use std::sync::Arc;

use serde_json::{Value, json};

use super::faults::ApiError;
use super::fixtures;
use super::params::{InputFile, Params};
use super::records::{CallbackAnswer, MediaKind, MediaSource, SentMedia, SentMessage};
use super::state::{Inner, Shared};
use super::{polling, webhook};

/// The longest text a message may have, in characters.
const MAX_TEXT: usize = 4096;

/// The longest caption a photo or document may have, in characters.
const MAX_CAPTION: usize = 1024;

/// A method the stand-in implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    GetMe,
    GetUpdates,
    SendMessage,
    SendPhoto,
    SendDocument,
    AnswerCallbackQuery,
    SetWebhook,
    DeleteWebhook,
    GetWebhookInfo,
    GetFile,
}

impl Method {
    const ALL: [Method; 10] = [
        Self::GetMe,
        Self::GetUpdates,
        Self::SendMessage,
        Self::SendPhoto,
        Self::SendDocument,
        Self::AnswerCallbackQuery,
        Self::SetWebhook,
        Self::DeleteWebhook,
        Self::GetWebhookInfo,
        Self::GetFile,
    ];

    /// The name as the Bot API documents it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::GetMe => "getMe",
            Self::GetUpdates => "getUpdates",
            Self::SendMessage => "sendMessage",
            Self::SendPhoto => "sendPhoto",
            Self::SendDocument => "sendDocument",
            Self::AnswerCallbackQuery => "answerCallbackQuery",
            Self::SetWebhook => "setWebhook",
            Self::DeleteWebhook => "deleteWebhook",
            Self::GetWebhookInfo => "getWebhookInfo",
            Self::GetFile => "getFile",
        }
    }

    /// The method named, in any case.
    pub(super) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(name))
    }
}

/// Runs a method; its result is the `result` of the answer.
pub(super) async fn dispatch(
    shared: &Arc<Shared>,
    method: Method,
    params: &Params,
    token: &str,
) -> Result<Value, ApiError> {
    match method {
        Method::GetMe => Ok(get_me(shared, token)),
        Method::GetUpdates => polling::get_updates(shared, params).await,
        Method::SendMessage => send_message(shared, params, token),
        Method::SendPhoto => send_media(shared, params, token, MediaKind::Photo),
        Method::SendDocument => send_media(shared, params, token, MediaKind::Document),
        Method::AnswerCallbackQuery => answer_callback_query(shared, params),
        Method::SetWebhook => webhook::set_webhook(shared, params),
        Method::DeleteWebhook => webhook::delete_webhook(shared, params),
        Method::GetWebhookInfo => Ok(webhook::get_webhook_info(shared)),
        Method::GetFile => get_file(shared, params),
    }
}

fn get_me(shared: &Shared, token: &str) -> Value {
    let mut me = shared.bot_user(token);
    for (k, v) in [
        ("can_join_groups", true),
        ("can_read_all_group_messages", false),
        ("supports_inline_queries", false),
        ("can_connect_to_business", false),
        ("has_main_web_app", false),
    ] {
        me[k] = Value::Bool(v);
    }
    me
}

/// What every send takes besides its content.
struct Common {
    chat_id: i64,
    thread_id: Option<i64>,
    parse_mode: Option<String>,
    reply_to: Option<i64>,
    /// Whether a reply to a message that does not exist is sent anyway.
    reply_optional: bool,
    reply_markup: Option<Value>,
}

impl Common {
    fn read(params: &Params) -> Result<Self, ApiError> {
        let chat_id = match params.int("chat_id") {
            Ok(Some(id)) if id != 0 => id,
            Ok(None) => return Err(ApiError::bad_request("chat_id is empty")),
            _ => return Err(ApiError::bad_request("chat not found")),
        };
        let parse_mode = params.string("parse_mode")?.filter(|m| !m.is_empty());
        if let Some(mode) = &parse_mode
            && !["HTML", "Markdown", "MarkdownV2"].iter().any(|m| m.eq_ignore_ascii_case(mode))
        {
            return Err(ApiError::bad_request(format!("unsupported parse_mode \"{mode}\"")));
        }
        let reply = params.json("reply_parameters")?;
        let reply_to = match &reply {
            Some(r) => Some(
                r["message_id"]
                    .as_i64()
                    .ok_or_else(|| ApiError::bad_request("reply_parameters lack message_id"))?,
            ),
            None => params.int("reply_to_message_id")?,
        };
        let reply_optional = match &reply {
            Some(r) => r["allow_sending_without_reply"].as_bool().unwrap_or(false),
            None => params.boolean("allow_sending_without_reply")?.unwrap_or(false),
        };
        let reply_markup = params.json("reply_markup")?;
        if reply_markup.as_ref().is_some_and(|m| !m.is_object()) {
            return Err(ApiError::bad_request("can't parse reply keyboard markup JSON object"));
        }
        Ok(Self {
            chat_id,
            thread_id: params.int("message_thread_id")?,
            parse_mode,
            reply_to,
            reply_optional,
            reply_markup,
        })
    }

    /// The message the bot sends, without content, and its id; records nothing yet.
    fn message(&self, inner: &mut Inner, bot: Value) -> Result<(Value, i64), ApiError> {
        let quoted = self.reply_to.and_then(|id| inner.messages.get(&(self.chat_id, id)).cloned());
        if self.reply_to.is_some() && quoted.is_none() && !self.reply_optional {
            return Err(ApiError::bad_request("message to be replied not found"));
        }
        let message_id = inner.next_message_id(self.chat_id);
        let mut m = json!({
            "message_id": message_id,
            "from": bot,
            "chat": fixtures::chat(self.chat_id),
            "date": fixtures::unix_now(),
        });
        if let Some(thread) = self.thread_id {
            m["message_thread_id"] = json!(thread);
            m["is_topic_message"] = json!(true);
        }
        if let Some(q) = quoted {
            m["reply_to_message"] = q;
        }
        // Only inline keyboards stay attached to a message; other markups act on the client.
        if let Some(markup) = &self.reply_markup
            && markup.get("inline_keyboard").is_some()
        {
            m["reply_markup"] = markup.clone();
        }
        Ok((m, message_id))
    }

    fn record(
        self,
        method: &'static str,
        message_id: i64,
        text: Option<String>,
        media: Option<SentMedia>,
    ) -> SentMessage {
        SentMessage {
            method,
            chat_id: self.chat_id,
            message_id,
            thread_id: self.thread_id,
            text,
            parse_mode: self.parse_mode,
            reply_to_message_id: self.reply_to,
            reply_markup: self.reply_markup,
            media,
        }
    }
}

fn send_message(shared: &Shared, params: &Params, token: &str) -> Result<Value, ApiError> {
    let common = Common::read(params)?;
    let text = params.string("text")?.unwrap_or_default();
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if text.chars().count() > MAX_TEXT {
        return Err(ApiError::bad_request("message is too long"));
    }
    let bot = shared.bot_user(token);
    shared.update(|inner| {
        let (mut m, message_id) = common.message(inner, bot)?;
        m["text"] = Value::String(text.clone());
        inner.remember(&m);
        inner.sent.push(common.record(Method::SendMessage.name(), message_id, Some(text), None));
        Ok(m)
    })
}

fn send_media(
    shared: &Shared,
    params: &Params,
    token: &str,
    kind: MediaKind,
) -> Result<Value, ApiError> {
    let (method, field) = match kind {
        MediaKind::Photo => (Method::SendPhoto, "photo"),
        MediaKind::Document => (Method::SendDocument, "document"),
    };
    let common = Common::read(params)?;
    let file = params
        .input_file(field)?
        .ok_or_else(|| ApiError::bad_request(format!("there is no {field} in the request")))?;
    let caption = params.string("caption")?.filter(|c| !c.is_empty());
    if caption.as_ref().is_some_and(|c| c.chars().count() > MAX_CAPTION) {
        return Err(ApiError::bad_request("message caption is too long"));
    }
    let bot = shared.bot_user(token);
    shared.update(|inner| {
        let (source, file_id, file_name) = match file {
            InputFile::Upload { bytes, .. } if bytes.is_empty() => {
                return Err(ApiError::bad_request("file must be non-empty"));
            }
            InputFile::Upload { file_name, bytes } => {
                let file_id = inner.store_file(bytes.clone());
                (MediaSource::Upload { file_name: file_name.clone(), bytes }, file_id, file_name)
            }
            InputFile::Reference(url)
                if url.starts_with("http://") || url.starts_with("https://") =>
            {
                // The stand-in fetches nothing: the URL's file is empty.
                let file_id = inner.store_file(Vec::new());
                let name = url.rsplit('/').next().filter(|n| !n.is_empty()).map(str::to_owned);
                (MediaSource::Url(url), file_id, name)
            }
            InputFile::Reference(file_id) => {
                if !inner.files.contains_key(&file_id) {
                    return Err(ApiError::bad_request("wrong file identifier/HTTP URL specified"));
                }
                (MediaSource::FileId(file_id.clone()), file_id, None)
            }
        };
        let (mut m, message_id) = common.message(inner, bot)?;
        m[field] = match kind {
            MediaKind::Photo => fixtures::photo(&file_id),
            MediaKind::Document => {
                fixtures::document(&file_id, file_name.as_deref().unwrap_or("document"))
            }
        };
        if let Some(c) = &caption {
            m["caption"] = Value::String(c.clone());
        }
        inner.remember(&m);
        let media = SentMedia { kind, source, file_id };
        inner.sent.push(common.record(method.name(), message_id, caption, Some(media)));
        Ok(m)
    })
}

fn answer_callback_query(shared: &Shared, params: &Params) -> Result<Value, ApiError> {
    // Spelled as teloxide's `ApiError::InvalidQueryId` matches it.
    let invalid = || {
        ApiError::bad_request(
            "query is too old and response timeout expired or query id is invalid",
        )
    };
    let id = params.string("callback_query_id")?.ok_or_else(invalid)?;
    let answer = CallbackAnswer {
        callback_query_id: id.clone(),
        text: params.string("text")?,
        show_alert: params.boolean("show_alert")?.unwrap_or(false),
        url: params.string("url")?,
        cache_time: params.int("cache_time")?,
    };
    shared.update(|inner| {
        if !inner.open_callbacks.remove(&id) {
            return Err(invalid());
        }
        inner.callback_answers.push(answer);
        Ok(Value::Bool(true))
    })
}

fn get_file(shared: &Shared, params: &Params) -> Result<Value, ApiError> {
    let file_id = params
        .string("file_id")?
        .filter(|f| !f.is_empty())
        .ok_or_else(|| ApiError::bad_request("file_id not specified"))?;
    let inner = shared.lock();
    let file = inner.files.get(&file_id).ok_or_else(|| ApiError::bad_request("invalid file id"))?;
    Ok(json!({
        "file_id": file_id,
        "file_unique_id": fixtures::file_unique_id(&file_id),
        "file_size": file.bytes.len(),
        "file_path": file.path,
    }))
}

/// The bytes of a file by its `file_path`, for the download route.
pub(super) fn download(shared: &Shared, file_path: &str) -> Option<Vec<u8>> {
    shared.lock().files.values().find(|f| f.path == file_path).map(|f| f.bytes.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_match_in_any_case() {
        assert_eq!(Method::parse("getUpdates"), Some(Method::GetUpdates));
        assert_eq!(Method::parse("GetUpdates"), Some(Method::GetUpdates));
        assert_eq!(Method::parse("SENDMESSAGE"), Some(Method::SendMessage));
        assert_eq!(Method::parse("editMessageText"), None);
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(m));
        }
    }
}
