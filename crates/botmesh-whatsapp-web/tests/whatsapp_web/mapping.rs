//! Inbound mapping: every kind of message, groups, replies, status updates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use botmesh_core::{Bot, BotError, Content};
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_whatsapp_web::WhatsAppEvent;
use botmesh_whatsapp_web::seam::{WaBody, WaContact, WaIncoming, WaKey, WaMediaKind};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// What the bot makes of each message: a line naming everything it mapped.
fn describe(content: &Content) -> String {
    match content {
        Content::Text { body } => format!("text {body}"),
        Content::Media { kind, media, caption } => format!(
            "media {kind:?} {} {} {}",
            media.mime.as_deref().unwrap_or("-"),
            media.file_name.as_deref().unwrap_or("-"),
            caption.as_deref().unwrap_or("-")
        ),
        Content::Voice { media, seconds } => {
            format!("voice {} {seconds:?}", media.mime.as_deref().unwrap_or("-"))
        }
        Content::Location { latitude, longitude, name } => {
            format!("location {latitude} {longitude} {}", name.as_deref().unwrap_or("-"))
        }
        Content::Contacts { contacts } => {
            let c = &contacts[0];
            format!("contacts {} {} {:?}", c.name, c.phones.join(","), c.user_id)
        }
        Content::Button { id, title } => format!("button {id} {title}"),
        Content::Reaction { to, emoji } => format!("reaction {to} {emoji:?}"),
        Content::Edit { of, content } => format!("edit {of} -> {}", describe(content)),
        Content::Unsupported { kind, .. } => format!("unsupported {kind}"),
        other => format!("other {}", other.type_name()),
    }
}

#[tokio::test]
async fn every_kind_of_message_reaches_the_bot_typed_and_media_bytes_are_fetched() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let bot = Bot::builder()
        .provider(provider(&network, &dir, &Arc::default()))
        .on_message(|ctx| async move {
            let inbound = &ctx.message().inbound;
            let mut line = describe(&inbound.content);
            if let Some(to) = &inbound.reply_to {
                line.push_str(&format!(" (reply to {to})"));
            }
            if inbound.content.media().is_some() {
                line.push_str(&format!(" [{} bytes]", ctx.media().await?.len()));
            }
            ctx.reply(line).await?;
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let ana = "34600000001";
    let chat = jid(ana);
    let photo = network.upload(vec![7u8; 1234], "image/jpeg");
    let doc = network.upload(vec![1u8; 10], "application/pdf").with_file_name("bill.pdf");
    let voice = network.upload(vec![2u8; 20], "audio/ogg; codecs=opus");
    let media = |kind, media, caption: Option<&str>| WaBody::Media {
        kind,
        media,
        caption: caption.map(str::to_owned),
        seconds: Some(4),
    };
    let first = network.user_says(ana, "hello");
    let bodies = vec![
        media(WaMediaKind::Image, photo.clone(), Some("my cat")),
        media(WaMediaKind::Video, photo.clone(), None),
        media(WaMediaKind::Document, doc, Some("the bill")),
        media(WaMediaKind::Sticker, photo.clone(), None),
        media(WaMediaKind::Voice, voice.clone(), None),
        media(WaMediaKind::Audio, voice, None),
        WaBody::Location { latitude: 40.4, longitude: -3.7, name: Some("Sol".into()) },
        WaBody::Contacts(vec![{
            let mut c = WaContact::new("Bea", vec!["+34 600 000 002".into()]);
            c.wa_id = Some("34600000002".into());
            c
        }]),
        WaBody::ButtonReply { id: "yes".into(), title: "Yes please".into() },
        WaBody::Reaction {
            to: WaKey::new(chat.clone(), first.clone()), emoji: Some("👍".into())
        },
        WaBody::Edit {
            of: WaKey::new(chat.clone(), first.clone()),
            body: Box::new(WaBody::Text("hello!".into())),
        },
        WaBody::Other { kind: "poll".into(), raw: "{}".into() },
    ];
    for body in bodies {
        network.user_sends_body(ana, body);
    }
    let reply = WaIncoming::new(
        chat.clone(),
        network.stanza_id(),
        chat.clone(),
        WaBody::Text("yes".into()),
    )
    .quoting(WaKey::new(chat.clone(), "BOT1").mine());
    network.user_sends(reply);
    let texts = wait_texts(&network, &chat, 14).await;
    let first_id = format!("{chat}/{first}");
    assert_eq!(
        texts,
        [
            "text hello".to_owned(),
            "media Image image/jpeg - my cat [1234 bytes]".to_owned(),
            "media Video image/jpeg - - [1234 bytes]".to_owned(),
            "media Document application/pdf bill.pdf the bill [10 bytes]".to_owned(),
            "media Sticker image/jpeg - - [1234 bytes]".to_owned(),
            "voice audio/ogg; codecs=opus Some(4) [20 bytes]".to_owned(),
            "media Audio audio/ogg; codecs=opus - - [20 bytes]".to_owned(),
            "location 40.4 -3.7 Sol".to_owned(),
            "contacts Bea +34 600 000 002 Some(\"34600000002\")".to_owned(),
            "button yes Yes please".to_owned(),
            format!("reaction {first_id} Some(\"👍\")"),
            format!("edit {first_id} -> text hello!"),
            "unsupported poll".to_owned(),
            format!("text yes (reply to {chat}/me/BOT1)"),
        ]
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn each_group_member_has_a_conversation_and_status_updates_are_events_not_messages() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handled);
    let bot = Bot::builder()
        .provider(provider(&network, &dir, &seen))
        .on_message(move |ctx| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let participant = ctx.message().inbound.participant.clone().unwrap_or_default();
                ctx.reply(format!("{} from {participant}", ctx.key())).await?;
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let status = WaIncoming::new(
        "status@broadcast",
        "S1",
        jid("34600000009"),
        WaBody::Text("on holiday".into()),
    )
    .with_push_name("Eve");
    network.user_sends(status);
    network.group_says("120363", "34600000001", "hi");
    network.group_says("120363", "34600000002", "hi");
    let texts = wait_texts(&network, "120363@g.us", 2).await;
    let (a, b) = (jid("34600000001"), jid("34600000002"));
    assert_eq!(
        texts,
        [
            format!("whatsapp-web:120363@g.us/{a} from {a}"),
            format!("whatsapp-web:120363@g.us/{b} from {b}")
        ]
    );
    event(&seen, |e| {
        matches!(e, WhatsAppEvent::Status { from, sender_name, content, .. }
            if *from == jid("34600000009") && sender_name.as_deref() == Some("Eve")
                && content.as_text() == Some("on holiday"))
    })
    .await;
    bot.wait_idle().await;
    assert_eq!(handled.load(Ordering::SeqCst), 2, "the status update woke no conversation");
    assert_eq!(network.pending(), 0, "the status update was acknowledged too");
    bot.stop().await.unwrap();
}
