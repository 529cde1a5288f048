//! Every kind of update the stand-in produces, parsed by teloxide into its typed kind (an
//! update teloxide cannot parse would come back as `UpdateKind::Error`).

use serde_json::json;
use teloxide::requests::Requester;
use teloxide::types::{
    ChatKind, MediaKind, Message, MessageId, MessageKind, PublicChatKind, ThreadId, Update,
    UpdateKind,
};

use super::super::fixtures;
use super::start;

fn message(update: &Update) -> &Message {
    match &update.kind {
        UpdateKind::Message(m) => m,
        other => panic!("not a message: {other:?}"),
    }
}

fn media(m: &Message) -> &MediaKind {
    match &m.kind {
        MessageKind::Common(c) => &c.media_kind,
        other => panic!("not a common message: {other:?}"),
    }
}

#[tokio::test]
async fn every_kind_of_update_parses_in_teloxide() {
    let (server, bot) = start().await;
    let supergroup = -1_009_876_543_210;
    server.user_says(42, 42, "private");
    server.user_says(-77, 42, "group");
    server.user_says_in_thread(supergroup, 5, 42, "topic");
    server.user_sends_photo(42, 42, b"img".to_vec(), None);
    let voice = server.register_file(b"ogg".to_vec());
    server.user_sends_message(42, 42, json!({ "voice": fixtures::voice(&voice, 3) }));
    let doc = server.register_file(b"pdf".to_vec());
    server.user_sends_message(42, 42, json!({ "document": fixtures::document(&doc, "a.pdf") }));
    server.user_sends_message(42, 42, json!({ "location": fixtures::location(52.5, 13.4) }));
    server.user_sends_message(
        42,
        42,
        json!({ "contact": fixtures::contact("+100", "Ana", Some(42)) }),
    );
    server.user_replies(42, 42, 1, "a reply");
    server.user_edits(42, 42, 1, "private, edited");
    let query = server.press_button(42, 42, "data", 1);
    let raw_id = server.next_message_id(-77);
    server.user_sends(json!({ "message": fixtures::text_message(-77, 43, raw_id, "by hand") }));

    let updates = bot.get_updates().await.unwrap();
    assert_eq!(updates.len(), 12);
    let ids: Vec<u32> = updates.iter().map(|u| u.id.0).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    let m = message(&updates[0]);
    assert_eq!(m.text(), Some("private"));
    assert!(m.chat.is_private());
    assert_eq!(m.from.as_ref().unwrap().id.0, 42);
    assert_eq!(m.from.as_ref().unwrap().username.as_deref(), Some("user42"));

    let m = message(&updates[1]);
    assert!(m.chat.is_group());
    assert_eq!(m.chat.title(), Some("Group -77"));

    let m = message(&updates[2]);
    assert!(m.chat.is_supergroup());
    assert!(matches!(
        &m.chat.kind,
        ChatKind::Public(p) if matches!(&p.kind, PublicChatKind::Supergroup(s) if s.is_forum)
    ));
    assert_eq!(m.thread_id, Some(ThreadId(MessageId(5))));
    assert!(m.is_topic_message);

    assert!(matches!(media(message(&updates[3])), MediaKind::Photo(p) if p.photo.len() == 2));
    assert!(
        matches!(media(message(&updates[4])), MediaKind::Voice(v) if v.voice.file.id.0 == voice)
    );
    assert!(matches!(
        media(message(&updates[5])),
        MediaKind::Document(d) if d.document.file_name.as_deref() == Some("a.pdf")
    ));
    assert!(
        matches!(media(message(&updates[6])), MediaKind::Location(l) if l.location.latitude == 52.5)
    );
    assert!(matches!(
        media(message(&updates[7])),
        MediaKind::Contact(c) if c.contact.phone_number == "+100"
    ));

    let m = message(&updates[8]);
    assert_eq!(m.text(), Some("a reply"));
    assert_eq!(m.reply_to_message().and_then(Message::text), Some("private"));

    let UpdateKind::EditedMessage(m) = &updates[9].kind else { panic!("{:?}", updates[9].kind) };
    assert_eq!(m.text(), Some("private, edited"));
    assert_eq!(m.id, MessageId(1));

    let UpdateKind::CallbackQuery(q) = &updates[10].kind else { panic!("{:?}", updates[10].kind) };
    assert_eq!(q.id.0, query);
    // The query carries the message as it is now: edited.
    assert_eq!(q.regular_message().and_then(Message::text), Some("private, edited"));

    let m = message(&updates[11]);
    assert_eq!(m.text(), Some("by hand"));
    assert_eq!(m.id, MessageId(i32::try_from(raw_id).unwrap()));
}
