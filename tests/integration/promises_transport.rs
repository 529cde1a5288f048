//! Where a provider's transport runs: `ProviderSession::Shared` and `Leader` force what they
//! say whatever the provider declares, and a leader that stepped down for a transport that
//! stayed down campaigns again and leads once the replica that took over is gone.

use std::time::Duration;

use botmesh_coord::{CoordinationConfig, ProviderSession};
use botmesh_core::traits::Capabilities;
use botmesh_core::{Error, ErrorKind, Event, FollowReason, Outbound};
use botmesh_testing::TestProvider;
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica};

on_both_backends!(
    an_exclusive_provider_forced_shared_runs_its_transport_on_every_replica,
    a_shared_provider_forced_leader_runs_on_exactly_one_replica,
    a_leader_that_stepped_down_leads_again_once_the_replica_that_took_over_is_gone,
);

fn exclusive() -> TestProvider {
    TestProvider::with("wa", Capabilities::exclusive())
}

fn campaigned(r: &Replica) -> bool {
    r.rec.events().iter().any(|e| matches!(e, Event::Leader { .. } | Event::Follower { .. }))
}

/// The fences of the leaderships `r` won, in order.
fn leader_fences(r: &Replica) -> Vec<u64> {
    r.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Leader { fence, .. } => Some(fence),
            _ => None,
        })
        .collect()
}

/// Waits until `r` reported standing by for its transport.
async fn standing_by(r: &Replica) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r
        .rec
        .events()
        .iter()
        .any(|e| matches!(e, Event::Follower { reason, .. } if *reason == FollowReason::Standby))
    {
        assert!(Instant::now() < deadline, "never stood by");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn an_exclusive_provider_forced_shared_runs_its_transport_on_every_replica(
    backend: &impl Backend,
) {
    let shared = |c: CoordinationConfig| c.provider_session(ProviderSession::Shared);
    let a = replica(backend, "a", exclusive(), shared, |b| b).await;
    let b = replica(backend, "b", exclusive(), shared, |b| b).await;
    // Started with the bot: nobody campaigns for it.
    assert_eq!((a.provider.starts(), b.provider.starts()), (1, 1));
    assert!(a.bot.is_transport_running() && b.bot.is_transport_running());
    tokio::time::sleep(LEASE).await;
    assert!(!campaigned(&a) && !campaigned(&b), "no election ran");
    a.bot.send(&Outbound::text("c", "from a")).await.unwrap();
    b.bot.send(&Outbound::text("c", "from b")).await.unwrap();
}

async fn a_shared_provider_forced_leader_runs_on_exactly_one_replica(backend: &impl Backend) {
    let leader = |c: CoordinationConfig| c.provider_session(ProviderSession::Leader);
    let a = replica(backend, "a", TestProvider::new(), leader, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.unwrap();
    let b = replica(backend, "b", TestProvider::new(), leader, |b| b).await;
    standing_by(&b).await;
    tokio::time::sleep(LEASE).await;
    assert_eq!((a.provider.starts(), b.provider.starts()), (1, 0), "one runs, one stands by");
    assert!(a.bot.is_transport_running() && !b.bot.is_transport_running());
    let refused = b.bot.send(&Outbound::text("c", "hi")).await.unwrap_err();
    assert_eq!(refused.as_contract().map(Error::kind), Some(ErrorKind::ProviderNotLeader));
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::Leader { name, .. } if name == "provider:test"))
    );
}

async fn a_leader_that_stepped_down_leads_again_once_the_replica_that_took_over_is_gone(
    backend: &impl Backend,
) {
    let down = |c: CoordinationConfig| {
        c.provider_down(Duration::from_secs(2)).step_down_pause(Duration::from_secs(1))
    };
    let a = replica(backend, "a", exclusive(), down, |b| b).await;
    tokio::time::timeout(Duration::from_secs(10), a.bot.ready()).await.unwrap();
    let b = replica(backend, "b", exclusive(), down, |b| b).await;
    standing_by(&b).await;
    a.provider.close();
    tokio::time::timeout(Duration::from_secs(10), b.bot.ready()).await.unwrap();
    assert!(!a.bot.is_transport_running(), "a stepped down");
    // a campaigns again after its pause, and stands by while b leads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!a.bot.is_transport_running());
    b.coordinator.crash();
    // b's leadership lapses a lease after its last renewal; a's next campaign wins it.
    tokio::time::timeout(LEASE * 5, a.bot.ready()).await.unwrap();
    assert_eq!(a.provider.starts(), 2, "a connected again");
    let fences = leader_fences(&a);
    assert!(fences.len() == 2 && fences[1] > fences[0], "a led twice: {fences:?}");
    a.bot.send(&Outbound::text("c", "back")).await.unwrap();
}
