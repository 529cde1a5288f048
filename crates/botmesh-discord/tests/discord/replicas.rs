//! One gateway session across three replicas: who holds it, a crash, a gateway gone stale,
//! a revoked token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Store;
use botmesh_core::{Bot, Event, FollowReason, MemoryStore, TransportStatus};
use botmesh_testing::discord::{Author, DiscordServer, Fault};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

type Replicas = Vec<(Arc<MemoryCoordinator>, Bot)>;

fn leader(replicas: &Replicas) -> Option<usize> {
    replicas.iter().position(|(_, b)| b.runs_transport("discord"))
}

/// The lease of the take-over test: long enough that the new leader's start (two API calls and
/// the websocket handshake) is small beside it.
const TAKEOVER_LEASE: Duration = Duration::from_secs(2);

/// Three echo replicas on one hub and store, each with a lease of `lease` and coordination
/// from `config`.
async fn three(
    server: &DiscordServer,
    handled: &Arc<AtomicUsize>,
    lease: Duration,
    config: impl Fn(CoordinationConfig) -> CoordinationConfig,
) -> (Replicas, Vec<Arc<Mutex<Vec<Event>>>>) {
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (mut replicas, mut events) = (Vec::new(), Vec::new());
    for id in ["a", "b", "c"] {
        let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), id).with_lease(lease));
        let coordination = config(
            CoordinationConfig::new(Arc::clone(&coordinator))
                .settle(Duration::from_secs(2))
                .turn_wait(Duration::from_secs(10)),
        )
        .build();
        let builder = Bot::builder()
            .provider(discord(server))
            .store(Arc::clone(&store))
            .coordination(coordination);
        let (builder, seen) = recorded(builder);
        let bot = echo(builder, handled).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
        events.push(seen);
    }
    (replicas, events)
}

/// Five members of a guild channel say `word`; waits for the `n`-th answer in the channel.
async fn round(server: &DiscordServer, word: &str, n: usize) {
    for user in 1..=5 {
        server.user_says(
            7,
            &Author::in_guild(user, format!("u{user}"), 500),
            &format!("{word} {user}"),
        );
    }
    wait_texts(server, 7, n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_hold_one_session_and_a_standby_identifies_within_lease_and_a_third() {
    let server = DiscordServer::start().await.unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let (replicas, _) = three(&server, &handled, TAKEOVER_LEASE, |c| c).await;
    until("one replica holds the gateway", || {
        leader(&replicas).is_some() && server.live_sessions() == 1
    })
    .await;
    round(&server, "before", 5).await;
    let old = leader(&replicas).unwrap();
    let identified = server.identifies().len();
    let t0 = Instant::now();
    replicas[old].0.crash();
    until("a standby identifies", || server.identifies().len() > identified).await;
    let took_over = server.identifies()[identified] - t0;
    // The crashed replica's lease runs out after the lease and a free standby campaigns every
    // sixth of it, so the election promises a new leader within lease + lease / 3. Its
    // IDENTIFY follows the start (two API calls and the websocket handshake, a few
    // milliseconds alone), and a loaded two-core machine running the workspace's tests at once
    // may hold any of these tasks up for hundreds of milliseconds: a second of slack covers
    // that, and is still well under the next campaign round.
    let slack = Duration::from_secs(1);
    assert!(
        took_over <= TAKEOVER_LEASE + TAKEOVER_LEASE / 3 + slack,
        "identified after {took_over:?}"
    );
    until("a standby holds the gateway", || leader(&replicas).is_some_and(|l| l != old)).await;
    until("the new session is live", || server.live_sessions() == 1).await;
    round(&server, "after", 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 10, "every message handled once");
    assert_eq!(server.max_live_sessions(), 1, "never two gateway sessions at once");
    for (_, bot) in &replicas {
        bot.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_heartbeats_close_the_transport_and_another_replica_takes_the_gateway() {
    // Heartbeats every 200 ms: a session whose heartbeat goes unacknowledged is dropped by
    // serenity within two intervals.
    let server = DiscordServer::builder()
        .heartbeat_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    // `provider_down` is longer than the provider's first pauses before it connects again
    // (half a second doubling, and never under a random 1 to 5 s): if each new session opened
    // the transport at READY, the status would flap and the leader never step down.
    let provider_down = Duration::from_secs(6);
    let (replicas, events) = three(&server, &handled, LEASE, |c| {
        // The stepped-down leader waits long before campaigning again, so another takes over.
        c.provider_down(provider_down).step_down_pause(Duration::from_secs(60))
    })
    .await;
    until("one replica holds the gateway", || {
        leader(&replicas).is_some() && server.live_sessions() == 1
    })
    .await;
    round(&server, "before", 5).await;
    let old = leader(&replicas).unwrap();
    let before = events[old].lock().unwrap().len();
    server.stop_acking();
    // The first session after the acknowledged one opens at READY; once it went stale too,
    // the next ones stay closed, as no heartbeat is acknowledged on them.
    let deadline = WITHIN + provider_down + Duration::from_secs(5);
    event_within(&events[old], deadline, |e| {
        matches!(e, Event::Follower { reason: FollowReason::ProviderDown, .. })
    })
    .await;
    assert!(!replicas[old].1.runs_transport("discord"), "the leader stepped down");
    let seen: Vec<TransportStatus> = transport_statuses(&events[old].lock().unwrap()[before..]);
    let opened = seen.iter().filter(|s| **s == TransportStatus::Open).count();
    assert!(opened <= 1, "the transport flapped: {seen:?}");
    assert_eq!(seen.last(), Some(&TransportStatus::Closed), "{seen:?}");
    // The gateway acknowledges again (the fault was the leader's connection): the replica that
    // takes over keeps its session.
    server.resume_acking();
    until("another replica holds the gateway", || {
        leader(&replicas).is_some_and(|l| l != old) && server.live_sessions() == 1
    })
    .await;
    round(&server, "after", 10).await;
    let after: Vec<TransportStatus> = transport_statuses(&events[old].lock().unwrap()[before..]);
    assert_eq!(after.last(), Some(&TransportStatus::Closed), "stayed closed: {after:?}");
    assert_eq!(server.max_live_sessions(), 1, "never two gateway sessions at once");
    for (_, bot) in &replicas {
        bot.stop().await.unwrap();
    }
}

/// The statuses among `events`, in order.
fn transport_statuses(events: &[Event]) -> Vec<TransportStatus> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Transport { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_closes_the_transport_for_good_and_the_leader_steps_down() {
    let server = DiscordServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let coordination = CoordinationConfig::new(coordinator)
        .provider_down(Duration::from_millis(500))
        .step_down_pause(Duration::from_secs(60))
        .build();
    let (builder, events) =
        recorded(Bot::builder().provider(discord(&server)).coordination(coordination));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    until("the session is live", || server.live_sessions() == 1).await;
    server.revoke_token();
    event(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. })).await;
    event(&events, |e| matches!(e, Event::Follower { reason: FollowReason::ProviderDown, .. }))
        .await;
    assert!(!bot.runs_transport("discord"), "stepped down: a standby may connect");
    assert_eq!(server.live_sessions(), 0);
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_on_a_send_closes_the_transport_and_the_leader_steps_down() {
    let server = DiscordServer::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), "a").with_lease(LEASE));
    let coordination = CoordinationConfig::new(coordinator)
        .provider_down(Duration::from_millis(500))
        .step_down_pause(Duration::from_secs(60))
        .build();
    let (builder, events) =
        recorded(Bot::builder().provider(discord(&server)).coordination(coordination));
    let bot = echo(builder, &Arc::default()).build().unwrap();
    bot.start().await.unwrap();
    tokio::time::timeout(WITHIN, bot.ready()).await.unwrap();
    until("the session is live", || server.live_sessions() == 1).await;
    // The token is refused on the API only: the gateway session itself stays up, so only the
    // send's 401 can close the transport.
    server.fail_next_send(Fault::Status {
        status: 401,
        code: 0,
        message: "401: Unauthorized".into(),
    });
    server.user_says(7, &Author::dm(11, "ana"), "hello");
    event(&events, |e| matches!(e, Event::Transport { status: TransportStatus::Closed, .. })).await;
    event(&events, |e| matches!(e, Event::Follower { reason: FollowReason::ProviderDown, .. }))
        .await;
    assert!(!bot.runs_transport("discord"), "stepped down: a standby may connect");
    // The bot closed the session; the server notices the closed socket a moment later.
    until("the session is closed", || server.live_sessions() == 0).await;
    assert_eq!(server.refused_identifies(), 0, "the gateway never refused the token");
    bot.stop().await.unwrap();
}
