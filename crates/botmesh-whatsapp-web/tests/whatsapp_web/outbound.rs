//! Outbound mapping: every kind the bot sends, replies quoting their message, receipts.

use std::sync::Arc;

use botmesh_core::{
    Bot, BotError, Button, DeliveryStatus, Event, MediaKind, MediaSource, Outbound, OutboundContent,
};
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_whatsapp_web::seam::{WaFile, WaKey, WaMediaKind, WaOutgoingBody, WaReceiptKind};

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

#[tokio::test]
async fn every_outbound_kind_goes_out_and_a_reply_quotes_the_user_s_message() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let bot = Bot::builder()
        .provider(provider(&network, &dir, &Arc::default()))
        .on_message(|ctx| async move {
            let (chat, said) = (ctx.chat().clone(), ctx.message().inbound.id.clone());
            let send = |content| Outbound::new(chat.clone(), content);
            let buttons = vec![Button::new("y", "Yes"), Button::new("n", "No")];
            let all = [
                send(OutboundContent::Text { body: "quoted".into() }).reply_to(said.clone()),
                send(OutboundContent::Buttons { body: "Sure?".into(), buttons }),
                send(OutboundContent::Media {
                    kind: MediaKind::Image,
                    source: MediaSource::bytes(
                        vec![1u8, 2, 3],
                        Some("a.png".into()),
                        Some("image/png".into()),
                    ),
                    caption: Some("a picture".into()),
                }),
                send(OutboundContent::Media {
                    kind: MediaKind::Document,
                    source: MediaSource::url("https://cdn.example/bill.pdf"),
                    caption: None,
                }),
                send(OutboundContent::Media {
                    kind: MediaKind::Audio,
                    source: MediaSource::bytes(
                        vec![9u8],
                        None,
                        Some("audio/ogg; codecs=opus".into()),
                    ),
                    caption: None,
                }),
                send(OutboundContent::Location {
                    latitude: 1.5,
                    longitude: 2.5,
                    name: Some("here".into()),
                }),
                send(OutboundContent::Reaction { to: said, emoji: Some("❤".into()) }),
            ];
            for message in &all {
                ctx.send_message(message).await?;
            }
            Ok::<_, BotError>(())
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    let chat = jid("34600000001");
    let said = network.user_says("34600000001", "hi");
    let sent = network.wait_for_sent(&chat, 7, WITHIN).await;
    let bodies: Vec<_> = sent.iter().map(|s| s.message.body.clone()).collect();
    assert_eq!(sent[0].message.quoted, Some(WaKey::new(chat.clone(), said.clone())));
    assert!(matches!(&bodies[0], WaOutgoingBody::Text(t) if t == "quoted"));
    assert!(matches!(&bodies[1], WaOutgoingBody::Text(t) if t == "Sure?\n\n1. Yes\n2. No"));
    assert!(matches!(&bodies[2], WaOutgoingBody::Media {
        kind: WaMediaKind::Image,
        file: WaFile::Bytes { data, file_name: Some(name), .. },
        caption: Some(caption),
    } if data.as_ref() == [1, 2, 3] && name == "a.png" && caption == "a picture"));
    assert!(matches!(&bodies[3], WaOutgoingBody::Media {
        kind: WaMediaKind::Document, file: WaFile::Url(url), ..
    } if url == "https://cdn.example/bill.pdf"));
    assert!(
        matches!(&bodies[4], WaOutgoingBody::Media { kind: WaMediaKind::Voice, .. }),
        "an Opus file is a voice note"
    );
    assert!(
        matches!(&bodies[5], WaOutgoingBody::Location { latitude, name: Some(n), .. } if *latitude == 1.5 && n == "here")
    );
    assert!(matches!(&bodies[6], WaOutgoingBody::Reaction { to, emoji: Some(e) }
        if *to == WaKey::new(chat.clone(), said.clone()) && e == "❤"));
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn receipts_of_the_bot_s_messages_are_delivery_events_with_the_send_s_id() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let (builder, events) =
        recorded(Bot::builder().provider(provider(&network, &dir, &Arc::default())));
    let bot = builder.build().unwrap();
    bot.start().await.unwrap();
    bot.ready().await;
    let chat = jid("34600000001");
    let receipt = bot.send(&Outbound::text(chat.as_str(), "hello")).await.unwrap();
    let id = receipt.id.unwrap();
    let stanza = network.sent(&chat)[0].id.clone();
    assert_eq!(id.as_str(), format!("{chat}/me/{stanza}"));
    network.receipt(&chat, vec![stanza.clone()], WaReceiptKind::Delivered);
    network.receipt(&chat, vec![stanza], WaReceiptKind::Read);
    event(&events, |e| {
        matches!(e, Event::Delivery { delivery, .. } if delivery.message == id && delivery.status == DeliveryStatus::Read)
    })
    .await;
    let delivered = events.lock().unwrap().iter().any(|e| {
        matches!(e, Event::Delivery { delivery, .. } if delivery.status == DeliveryStatus::Delivered)
    });
    assert!(delivered);
    bot.stop().await.unwrap();
}
