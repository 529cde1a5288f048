//! The conversions to and from whatsapp-rust, on values built here: what can run without
//! WhatsApp's servers.
#![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

use std::time::Duration;

use std::sync::Arc;

use whatsapp_rust::prelude::{BatchOrigin, Event, MessageBatch, MessageField, MessageInfo, wa};
use whatsapp_rust::wacore::net::DisconnectReason;
use whatsapp_rust::wacore::types::events::{
    Connected, Disconnected, PairingCode, PairingQrCode, StreamReplaced,
};

use super::convert::{Me, Uploaded, incoming, media_message, message, params};
use super::events::convert;
use crate::seam::{WaBody, WaEvent, WaKey, WaMediaKind, WaOutgoingBody};

const ANA: &str = "34600000001@s.whatsapp.net";
/// The bot, by phone number and by LID.
const BOT: &str = "34600000009@s.whatsapp.net";
const BOT_LID: &str = "99000000009@lid";
const GROUP: &str = "120363@g.us";

fn me() -> Me {
    Me::new(Some("34600000009:7@s.whatsapp.net".parse().unwrap()), Some(BOT_LID.parse().unwrap()))
}

/// What `m` carries, received from Ana in her one-to-one chat with the bot.
fn body(m: &wa::Message, _chat: &str) -> WaBody {
    incoming(m, &info(ANA, ANA, "X"), &me()).body
}

fn info(chat: &str, sender: &str, id: &str) -> MessageInfo {
    let mut info = MessageInfo::default();
    info.source.chat = chat.parse().unwrap();
    info.source.sender = sender.parse().unwrap();
    info.source.is_group = chat.ends_with("@g.us");
    info.id = id.to_owned();
    info.push_name = "Ana".to_owned();
    info
}

#[test]
fn text_and_a_quoted_reply_become_the_seam_s_message() {
    let plain = wa::Message { conversation: Some("hi".into()), ..Default::default() };
    let m = incoming(&plain, &info(ANA, ANA, "A1"), &me());
    assert_eq!(
        (m.key.chat.as_str(), m.key.id.as_str(), m.key.participant.as_deref()),
        (ANA, "A1", None)
    );
    assert_eq!((m.body, m.push_name.as_deref()), (WaBody::Text("hi".into()), Some("Ana")));
    let reply = wa::Message {
        extended_text_message: MessageField::some(wa::message::ExtendedTextMessage {
            text: Some("yes".into()),
            context_info: MessageField::some(wa::ContextInfo {
                stanza_id: Some("Q1".into()),
                participant: Some(ANA.into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    // Ana writes from her desktop (device 3): one author, whatever her device.
    let m = incoming(&reply, &info(GROUP, "34600000001:3@s.whatsapp.net", "A2"), &me());
    assert_eq!(m.key.participant.as_deref(), Some(ANA), "a group message names its author");
    assert_eq!(m.sender, ANA);
    assert_eq!(m.quoted, Some(WaKey::new(GROUP, "Q1").by(ANA)));
}

fn reply_to(participant: Option<&str>) -> wa::Message {
    wa::Message {
        extended_text_message: MessageField::some(wa::message::ExtendedTextMessage {
            text: Some("yes".into()),
            context_info: MessageField::some(wa::ContextInfo {
                stanza_id: Some("Q1".into()),
                participant: participant.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_quote_of_the_bot_s_message_is_the_bot_s_key_in_the_chat_it_came_in() {
    let quoted = |m: &wa::Message, chat: &str| {
        let key = incoming(m, &info(chat, ANA, "A3"), &me()).quoted.unwrap();
        crate::ids::message_id(&key)
    };
    // One-to-one: WhatsApp names the quoted author there too.
    assert_eq!(quoted(&reply_to(Some(BOT)), ANA), format!("{ANA}/me/Q1"));
    assert_eq!(quoted(&reply_to(Some(BOT_LID)), ANA), format!("{ANA}/me/Q1"), "by its LID");
    assert_eq!(quoted(&reply_to(Some(ANA)), ANA), format!("{ANA}/Q1"), "Ana quotes herself");
    assert_eq!(quoted(&reply_to(None), ANA), format!("{ANA}/Q1"));
    // A group.
    assert_eq!(quoted(&reply_to(Some(BOT)), GROUP), format!("{GROUP}/me/Q1"));
    assert_eq!(
        quoted(&reply_to(Some("34600000002:4@s.whatsapp.net")), GROUP),
        format!("{GROUP}/34600000002@s.whatsapp.net/Q1")
    );
}

fn reaction_to(key: wa::MessageKey) -> wa::Message {
    wa::Message {
        reaction_message: MessageField::some(wa::message::ReactionMessage {
            key: MessageField::some(key),
            text: Some("👍".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn edit_of(key: wa::MessageKey) -> wa::Message {
    wa::Message {
        protocol_message: MessageField::some(wa::message::ProtocolMessage {
            key: MessageField::some(key),
            r#type: Some(wa::message::protocol_message::Type::MessageEdit),
            edited_message: MessageField::some(wa::Message {
                conversation: Some("hello!".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn wa_key(remote: &str, from_me: bool, participant: Option<&str>) -> wa::MessageKey {
    wa::MessageKey {
        remote_jid: Some(remote.into()),
        from_me: Some(from_me),
        id: Some("B1".into()),
        participant: participant.map(str::to_owned),
    }
}

#[test]
fn keys_in_edits_and_reactions_are_read_from_the_sender_s_side() {
    let id = |m: &wa::Message, chat: &str, sender: &str| match incoming(
        m,
        &info(chat, sender, "A4"),
        &me(),
    )
    .body
    {
        WaBody::Reaction { to, .. } | WaBody::Edit { of: to, .. } => crate::ids::message_id(&to),
        other => panic!("{other:?}"),
    };
    // Ana edits her own message: her key says `from_me`, in the chat with the bot.
    assert_eq!(id(&edit_of(wa_key(BOT, true, None)), ANA, ANA), format!("{ANA}/B1"));
    // Ana reacts to the bot's message, and to her own.
    assert_eq!(id(&reaction_to(wa_key(BOT, false, None)), ANA, ANA), format!("{ANA}/me/B1"));
    assert_eq!(id(&reaction_to(wa_key(BOT_LID, false, None)), ANA, ANA), format!("{ANA}/me/B1"));
    assert_eq!(id(&reaction_to(wa_key(BOT, true, None)), ANA, ANA), format!("{ANA}/B1"));
    // In a group: to the bot's message, to another member's, to her own (from a second device).
    let desk = "34600000001:3@s.whatsapp.net";
    assert_eq!(
        id(&reaction_to(wa_key(GROUP, false, Some(BOT))), GROUP, desk),
        format!("{GROUP}/me/B1")
    );
    assert_eq!(
        id(&reaction_to(wa_key(GROUP, false, Some("34600000002:1@s.whatsapp.net"))), GROUP, desk),
        format!("{GROUP}/34600000002@s.whatsapp.net/B1")
    );
    assert_eq!(id(&edit_of(wa_key(GROUP, true, None)), GROUP, desk), format!("{GROUP}/{ANA}/B1"));
    // The bot's own message, sent from its phone, reacting to itself.
    assert_eq!(id(&reaction_to(wa_key(ANA, true, None)), ANA, BOT), format!("{ANA}/me/B1"));
}

#[test]
fn media_keeps_its_download_fields_in_its_handle_and_a_voice_note_is_a_voice() {
    let image = wa::Message {
        image_message: MessageField::some(wa::message::ImageMessage {
            mimetype: Some("image/jpeg".into()),
            caption: Some("cat".into()),
            direct_path: Some("/v/t62/x".into()),
            media_key: Some(vec![1, 2]),
            file_sha256: Some(vec![3, 4]),
            file_enc_sha256: Some(vec![5, 6]),
            file_length: Some(1234),
            ..Default::default()
        }),
        ..Default::default()
    };
    let WaBody::Media { kind, media, caption, .. } = body(&image, ANA) else { panic!() };
    assert_eq!(
        (kind, caption.as_deref(), media.size),
        (WaMediaKind::Image, Some("cat"), Some(1234))
    );
    let p = params(&media.handle).unwrap();
    assert_eq!((p.direct_path.as_str(), p.file_length), ("/v/t62/x", 1234));
    assert_eq!(
        (p.media_key, p.file_sha256, p.file_enc_sha256),
        (Some(vec![1, 2]), vec![3, 4], Some(vec![5, 6]))
    );
    assert!(params("not a handle").is_none());
    let voice = wa::Message {
        audio_message: MessageField::some(wa::message::AudioMessage {
            ptt: Some(true),
            seconds: Some(7),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(matches!(
        body(&voice, ANA),
        WaBody::Media { kind: WaMediaKind::Voice, seconds: Some(7), .. }
    ));
}

#[test]
fn locations_contacts_reactions_and_edits_map_and_anything_else_is_other() {
    let location = wa::Message {
        location_message: MessageField::some(wa::message::LocationMessage {
            degrees_latitude: Some(40.4),
            degrees_longitude: Some(-3.7),
            name: Some("Sol".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        body(&location, ANA),
        WaBody::Location { latitude: 40.4, longitude: -3.7, name: Some("Sol".into()) }
    );
    let card = wa::Message {
        contact_message: MessageField::some(wa::message::ContactMessage {
            display_name: Some("Bea".into()),
            vcard: Some(
                "BEGIN:VCARD\nFN:Bea\nTEL;type=CELL;waid=34600000002:+34 600 000 002\nEND:VCARD"
                    .into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let WaBody::Contacts(cards) = body(&card, ANA) else { panic!() };
    assert_eq!(
        (cards[0].phones.clone(), cards[0].wa_id.as_deref()),
        (vec!["+34 600 000 002".to_owned()], Some("34600000002"))
    );
    let key = wa::MessageKey {
        remote_jid: Some(ANA.into()),
        from_me: Some(true),
        id: Some("B1".into()),
        participant: None,
    };
    let reaction = wa::Message {
        reaction_message: MessageField::some(wa::message::ReactionMessage {
            key: MessageField::some(key.clone()),
            text: Some(String::new()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        body(&reaction, ANA),
        WaBody::Reaction { to: WaKey::new(ANA, "B1"), emoji: None },
        "an empty reaction takes it back"
    );
    let edit = wa::Message {
        protocol_message: MessageField::some(wa::message::ProtocolMessage {
            key: MessageField::some(key),
            r#type: Some(wa::message::protocol_message::Type::MessageEdit),
            edited_message: MessageField::some(wa::Message {
                conversation: Some("hello!".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        body(&edit, ANA),
        WaBody::Edit { of: WaKey::new(ANA, "B1"), body: Box::new(WaBody::Text("hello!".into())) }
    );
    let poll = wa::Message {
        poll_creation_message: MessageField::some(Default::default()),
        ..Default::default()
    };
    assert!(
        matches!(body(&poll, ANA), WaBody::Other { kind, raw } if kind == "poll" && raw == "poll")
    );
    // What is not understood is named, never dumped: it may hold keys.
    let secret = wa::Message {
        message_context_info: MessageField::some(wa::MessageContextInfo {
            message_secret: Some(vec![0xab; 32]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let WaBody::Other { raw, .. } = body(&secret, ANA) else { panic!() };
    assert!(raw.len() < 40 && !raw.contains("171") && !raw.contains("secret"), "{raw}");
}

#[test]
fn outgoing_bodies_become_messages_and_read_back_as_the_same_body() {
    let quoted = WaKey::new(ANA, "Q1");
    for out in [
        WaOutgoingBody::Text("plain".into()),
        WaOutgoingBody::Location { latitude: 1.5, longitude: 2.5, name: Some("here".into()) },
        WaOutgoingBody::Reaction { to: WaKey::new(ANA, "A1"), emoji: Some("👍".into()) },
    ] {
        let wa = message(&out, None).unwrap();
        let back = body(&wa, ANA);
        match (&out, back) {
            (WaOutgoingBody::Text(a), WaBody::Text(b)) => assert_eq!(*a, b),
            (WaOutgoingBody::Location { latitude, .. }, WaBody::Location { latitude: l, .. }) => {
                assert_eq!(*latitude, l)
            }
            (WaOutgoingBody::Reaction { to, emoji }, WaBody::Reaction { to: t, emoji: e }) => {
                assert_eq!((to, emoji), (&t, &e))
            }
            (out, back) => panic!("{out:?} came back as {back:?}"),
        }
    }
    let reply = message(&WaOutgoingBody::Text("yes".into()), Some(&quoted)).unwrap();
    let context =
        reply.extended_text_message.as_option().unwrap().context_info.as_option().unwrap();
    assert_eq!(context.stanza_id.as_deref(), Some("Q1"), "a reply quotes its message");
    assert!(
        message(
            &WaOutgoingBody::Media {
                kind: WaMediaKind::Image,
                file: crate::seam::WaFile::Url("u".into()),
                caption: None
            },
            None
        )
        .is_none()
    );
}

#[test]
fn an_upload_becomes_the_media_message_of_its_kind() {
    let up = Uploaded {
        url: "https://mmg.whatsapp.net/x".into(),
        direct_path: "/v/x".into(),
        media_key: vec![1; 32],
        file_enc_sha256: vec![2; 32],
        file_sha256: vec![3; 32],
        file_length: 9,
        media_key_timestamp: 1,
    };
    let voice = media_message(WaMediaKind::Voice, &up, "audio/ogg; codecs=opus", None, None, None);
    assert_eq!(voice.audio_message.as_option().unwrap().ptt, Some(true));
    let doc = media_message(
        WaMediaKind::Document,
        &up,
        "application/pdf",
        Some("a.pdf"),
        Some("bill"),
        None,
    );
    let d = doc.document_message.as_option().unwrap();
    assert_eq!(
        (d.file_name.as_deref(), d.caption.as_deref(), d.file_length),
        (Some("a.pdf"), Some("bill"), Some(9))
    );
    let WaBody::Media { media, .. } = body(&doc, ANA) else { panic!() };
    assert_eq!(
        params(&media.handle).unwrap().file_sha256,
        vec![3; 32],
        "what was sent downloads again"
    );
}

#[test]
fn the_library_s_events_become_the_seam_s() {
    let c = |e: Event| convert(&e, &me());
    assert!(matches!(c(Event::Connected(Connected::builder().build())), Some(WaEvent::Connected)));
    let qr = PairingQrCode::builder().code("2@abc".into()).timeout(Duration::from_secs(20)).build();
    assert!(
        matches!(c(Event::PairingQrCode(qr)), Some(WaEvent::Qr { code, .. }) if code == "2@abc")
    );
    let code =
        PairingCode::builder().code("ABCD1234".into()).timeout(Duration::from_secs(180)).build();
    assert!(
        matches!(c(Event::PairingCode(code)), Some(WaEvent::PairCode { code }) if code == "ABCD1234")
    );
    assert!(matches!(
        c(Event::StreamReplaced(StreamReplaced::builder().build())),
        Some(WaEvent::Replaced)
    ));
    let dropped = Disconnected::builder().reason(DisconnectReason::StreamEnded).build();
    assert!(matches!(
        c(Event::Disconnected(dropped)),
        Some(WaEvent::Disconnected { reconnecting: true })
    ));
    // Batches the hook committed reached the provider through the hook already.
    let committed = MessageBatch::builder()
        .messages(Arc::from(Vec::new()))
        .origin(BatchOrigin::Live)
        .hook_committed(true)
        .build();
    assert!(c(Event::Messages(committed)).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opens_its_store_in_the_directory_and_closes() {
    use futures_util::StreamExt;

    use crate::seam::{WaConnector, WaOpen, WaPairing};

    let dir = std::env::temp_dir().join(format!("botmesh-wa-rust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let open = WaOpen::new(&dir, WaPairing::Qr, "whatsapp-web");
    let mut session = super::WhatsAppRust::new().open(open).await.unwrap();
    assert!(dir.join(super::DATABASE_FILE).exists(), "the session's keys live in the directory");
    // No WhatsApp server is reachable here: the client keeps trying to connect until closed.
    // Closing ends it, and its events, within a generous bound.
    tokio::time::timeout(Duration::from_secs(30), session.client.close()).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while session.events.next().await.is_some() {}
    });
    ended.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
