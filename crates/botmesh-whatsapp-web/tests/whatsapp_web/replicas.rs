//! Three replicas on one session directory: only the leader opens the session, a standby
//! takes over within `lease + lease / 3` of the leader crashing, and a logged-out leader
//! steps down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Provider, Store};
use botmesh_core::{Bot, Durability, Event, FollowReason, MemoryStore, TransportStatus};
use botmesh_testing::whatsapp_web::{PhoneNetwork, jid};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use botmesh_whatsapp_web::{WhatsAppEvent, is_locked};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

const ID: &str = "whatsapp-web";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_opens_the_session_and_a_standby_opens_it_within_lease_and_a_third() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(provider(&network, &dir, &Arc::default()))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let leader = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().position(|(_, b)| b.runs_transport(ID))
    };
    until("a replica opens the session", || leader(&replicas).is_some() && network.connected())
        .await;
    // Give the standbys several campaign periods (a third of the lease each) to misbehave.
    tokio::time::sleep(LEASE).await;
    let running = replicas.iter().filter(|(_, b)| b.runs_transport(ID)).count();
    assert_eq!(running, 1, "one replica runs the session");
    assert!(is_locked(&dir), "the leader holds the session's lock");
    assert_eq!(
        (network.sessions_opened(), network.openers(&dir)),
        (1, 1),
        "opened once, by the leader"
    );
    for n in 1..=3 {
        network.user_says(&format!("3460000000{n}"), &format!("before {n}"));
    }
    for n in 1..=3 {
        wait_texts(&network, &jid(&format!("3460000000{n}")), 1).await;
    }

    let old = leader(&replicas).unwrap();
    let t0 = Instant::now();
    replicas[old].0.crash();
    // Said while nobody is connected: WhatsApp keeps them for the next session.
    for n in 1..=3 {
        network.user_says(&format!("3460000000{n}"), &format!("after {n}"));
    }
    until("a standby opens the session", || network.sessions_opened() == 2).await;
    let took_over = t0.elapsed();
    // The lease runs out at most `lease` after the crash and a standby campaigns every third
    // of it; the slack is the scheduling around it (see `TAKEOVER_SLACK`).
    assert!(
        took_over <= LEASE + LEASE / 3 + TAKEOVER_SLACK,
        "a standby opened the session after {took_over:?}"
    );
    // The bot counts the transport as its own once `start` returned: a moment after the open.
    let standby = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().enumerate().any(|(i, (_, b))| i != old && b.runs_transport(ID))
    };
    until("a standby runs the session", || standby(&replicas)).await;
    for n in 1..=3 {
        let chat = jid(&format!("3460000000{n}"));
        let texts = wait_texts(&network, &chat, 2).await;
        assert_eq!(texts, [format!("echo text before {n}"), format!("echo text after {n}")]);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 6, "every message handled once");
    assert_eq!(network.max_openers(&dir), 1, "never two openers of the session at once");
    for (i, (_, bot)) in replicas.iter().enumerate() {
        if i != old {
            bot.stop().await.unwrap();
        }
    }
    assert!(!is_locked(&dir), "stopped, the leader unlocked the session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_out_leader_reports_it_closes_its_transport_and_steps_down() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let provider_down = Duration::from_millis(500);
    let coordination = CoordinationConfig::new(coordinator)
        .provider_down(provider_down)
        .step_down_pause(Duration::from_secs(60))
        .build();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (builder, events) = recorded(
        Bot::builder().provider(provider(&network, &dir, &seen)).coordination(coordination),
    );
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    let t0 = Instant::now();
    network.log_out();
    event(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. })).await;
    event(&events, |e| {
        matches!(e, Event::Error { error, .. } if error.to_string().contains("pair the device again"))
    })
    .await;
    event(&seen, |e| matches!(e, WhatsAppEvent::LoggedOut { .. })).await;
    event(&events, |e| matches!(e, Event::Follower { reason: FollowReason::ProviderDown, .. }))
        .await;
    let stepped_down = t0.elapsed();
    assert!(stepped_down >= provider_down, "not before provider_down: {stepped_down:?}");
    assert!(!bot.runs_transport(ID), "stepped down: a standby may connect");
    assert!(!is_locked(&dir), "stepping down closed the session and unlocked it");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_session_replaced_elsewhere_or_given_up_closes_the_transport() {
    let network = PhoneNetwork::new();
    let dir = session_dir();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let provider = provider(&network, &dir, &seen);
    let (builder, events) = recorded(Bot::builder().provider(provider.clone()));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    network.replace();
    event(&seen, |e| matches!(e, WhatsAppEvent::Replaced)).await;
    event(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. })).await;
    bot.stop().await.unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    until("connected again", || provider.status() == TransportStatus::Open).await;
    // Only what comes after giving up counts: the stop above reported a Closed of its own.
    let before = events.lock().unwrap().len();
    network.give_up();
    event(&seen, |e| matches!(e, WhatsAppEvent::GaveUp)).await;
    let closed = || {
        events.lock().unwrap()[before..]
            .iter()
            .filter(|e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. }))
            .count()
    };
    until("the transport closed again", || closed() >= 1).await;
    assert_eq!(provider.status(), TransportStatus::Closed, "giving up closed the transport");
    bot.stop().await.unwrap();
}
