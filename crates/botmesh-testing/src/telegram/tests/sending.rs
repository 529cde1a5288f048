//! Sends, uploads, files and callback answers, as teloxide makes them.

use teloxide::net::Download;
use teloxide::payloads::{AnswerCallbackQuerySetters, SendMessageSetters, SendPhotoSetters};
use teloxide::requests::Requester;
use teloxide::types::{
    ChatId, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, MessageId, ParseMode,
    ReplyParameters, ThreadId, UpdateKind,
};
use teloxide::{ApiError, RequestError};

use super::super::{MediaKind, MediaSource};
use super::{SOON, start};

#[tokio::test]
async fn send_message_is_recorded_and_answered_with_a_message() {
    let (server, bot) = start().await;
    server.user_says(42, 42, "hi");
    let keyboard = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Yes", "yes")]]);
    let sent = bot
        .send_message(ChatId(42), "<b>hello</b>")
        .parse_mode(ParseMode::Html)
        .reply_parameters(ReplyParameters::new(MessageId(1)))
        .reply_markup(keyboard)
        .await
        .unwrap();
    assert_eq!(sent.id, MessageId(2), "message ids count per chat, the user's included");
    assert_eq!(sent.text(), Some("<b>hello</b>"));
    assert_eq!(sent.chat.id, ChatId(42));
    assert_eq!(sent.reply_to_message().and_then(|m| m.text()), Some("hi"));
    assert!(sent.reply_markup().is_some());
    let second = bot.send_message(ChatId(42), "again").await.unwrap();
    assert_eq!(second.id, MessageId(3));

    let records = server.sent(42);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].method, "sendMessage");
    assert_eq!(records[0].message_id, 2);
    assert_eq!(records[0].parse_mode.as_deref(), Some("HTML"));
    assert_eq!(records[0].reply_to_message_id, Some(1));
    assert_eq!(
        records[0].reply_markup.as_ref().unwrap()["inline_keyboard"][0][0]["callback_data"],
        "yes"
    );
    assert_eq!(records[1].reply_to_message_id, None);
    assert_eq!(server.sent_texts(42), ["<b>hello</b>", "again"]);
    assert!(server.sent(43).is_empty());
}

#[tokio::test]
async fn sends_to_a_forum_topic_keep_their_thread() {
    let (server, bot) = start().await;
    let group = -1_001_234_567_890;
    let sent = bot
        .send_message(ChatId(group), "in topic")
        .message_thread_id(ThreadId(MessageId(77)))
        .await
        .unwrap();
    assert_eq!(sent.thread_id, Some(ThreadId(MessageId(77))));
    assert!(sent.chat.is_supergroup());
    assert_eq!(server.sent(group)[0].thread_id, Some(77));
}

#[tokio::test]
async fn bad_sends_are_refused_and_not_recorded() {
    let (server, bot) = start().await;
    let empty = bot.send_message(ChatId(1), "  ").await;
    assert!(matches!(empty, Err(RequestError::Api(ApiError::MessageTextIsEmpty))), "{empty:?}");
    let long = bot.send_message(ChatId(1), "x".repeat(4097)).await;
    assert!(matches!(long, Err(RequestError::Api(ApiError::MessageIsTooLong))), "{long:?}");
    let orphan = bot
        .send_message(ChatId(1), "re")
        .reply_parameters(ReplyParameters::new(MessageId(99)))
        .await;
    assert!(
        matches!(orphan, Err(RequestError::Api(ApiError::MessageToReplyNotFound))),
        "{orphan:?}"
    );
    assert!(server.all_sent().is_empty());
}

#[tokio::test]
async fn an_uploaded_photo_is_recorded_and_can_be_fetched_back() {
    let (server, bot) = start().await;
    let bytes = b"\x89PNG not really".to_vec();
    let sent = bot
        .send_photo(ChatId(42), InputFile::memory(bytes.clone()).file_name("cat.png"))
        .caption("a cat")
        .await
        .unwrap();
    let photo = sent.photo().unwrap();
    assert!(!photo.is_empty());
    assert_eq!(sent.caption(), Some("a cat"));

    let records = server.sent(42);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].method, "sendPhoto");
    assert_eq!(records[0].text.as_deref(), Some("a cat"));
    let media = records[0].media.as_ref().unwrap();
    assert_eq!(media.kind, MediaKind::Photo);
    assert_eq!(
        media.source,
        MediaSource::Upload { file_name: Some("cat.png".to_owned()), bytes: bytes.clone() }
    );
    assert_eq!(media.file_id, photo[0].file.id.0);

    // The issued file_id resolves, and the file downloads.
    let file = bot.get_file(photo[0].file.id.clone()).await.unwrap();
    assert_eq!(file.size as usize, bytes.len());
    let mut fetched = Vec::new();
    bot.download_file(&file.path, &mut fetched).await.unwrap();
    assert_eq!(fetched, bytes);

    // Sending it again by file_id is recorded as such.
    bot.send_photo(ChatId(42), InputFile::file_id(photo[0].file.id.clone())).await.unwrap();
    assert_eq!(
        server.sent(42)[1].media.as_ref().unwrap().source,
        MediaSource::FileId(media.file_id.clone())
    );
    // A file_id the stand-in never issued is refused.
    let unknown = bot.send_photo(ChatId(42), InputFile::file_id("nope".into())).await;
    assert!(matches!(unknown, Err(RequestError::Api(ApiError::WrongFileIdOrUrl))), "{unknown:?}");
    let unknown = bot.get_file("nope".into()).await;
    assert!(matches!(unknown, Err(RequestError::Api(ApiError::FileIdInvalid))), "{unknown:?}");
}

#[tokio::test]
async fn documents_go_by_upload_or_url() {
    let (server, bot) = start().await;
    let sent = bot
        .send_document(ChatId(-5), InputFile::memory(&b"report"[..]).file_name("r.txt"))
        .await
        .unwrap();
    assert_eq!(sent.document().unwrap().file_name.as_deref(), Some("r.txt"));
    let url = "https://example.com/a.pdf";
    bot.send_document(ChatId(-5), InputFile::url(url.parse().unwrap())).await.unwrap();
    let records = server.sent(-5);
    assert_eq!(records.iter().map(|r| r.method).collect::<Vec<_>>(), ["sendDocument"; 2]);
    let sources: Vec<_> = records.iter().map(|r| r.media.clone().unwrap().source).collect();
    assert_eq!(
        sources,
        [
            MediaSource::Upload { file_name: Some("r.txt".to_owned()), bytes: b"report".to_vec() },
            MediaSource::Url(url.to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_user_photo_can_be_fetched_by_the_bot() {
    let (server, bot) = start().await;
    server.user_sends_photo(9, 9, b"jpeg bytes".to_vec(), Some("look"));
    let updates = bot.get_updates().await.unwrap();
    let UpdateKind::Message(m) = &updates[0].kind else { panic!("{:?}", updates[0].kind) };
    assert_eq!(m.caption(), Some("look"));
    let largest = m.photo().unwrap().last().unwrap();
    let file = bot.get_file(largest.file.id.clone()).await.unwrap();
    let mut fetched = Vec::new();
    bot.download_file(&file.path, &mut fetched).await.unwrap();
    assert_eq!(fetched, b"jpeg bytes");
}

#[tokio::test]
async fn a_pressed_button_is_answered_once() {
    let (server, bot) = start().await;
    let keyboard = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Go", "go")]]);
    let menu = bot.send_message(ChatId(42), "menu").reply_markup(keyboard).await.unwrap();
    let query_id = server.press_button(42, 42, "go", i64::from(menu.id.0));

    let updates = bot.get_updates().await.unwrap();
    let UpdateKind::CallbackQuery(q) = &updates[0].kind else { panic!("{:?}", updates[0].kind) };
    assert_eq!(q.id.0, query_id);
    assert_eq!(q.data.as_deref(), Some("go"));
    assert_eq!(q.from.id.0, 42);
    let message = q.regular_message().unwrap();
    assert_eq!(message.id, menu.id);
    assert_eq!(message.text(), Some("menu"));

    bot.answer_callback_query(q.id.clone()).text("done").show_alert(true).await.unwrap();
    let answers = server.wait_for_callback_answers(1, SOON).await;
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].callback_query_id, query_id);
    assert_eq!(answers[0].text.as_deref(), Some("done"));
    assert!(answers[0].show_alert);
    // A query is answered once.
    let again = bot.answer_callback_query(q.id.clone()).await;
    assert!(matches!(again, Err(RequestError::Api(ApiError::InvalidQueryId))), "{again:?}");
    assert_eq!(server.callback_answers().len(), 1);
}
