//! Scheduled jobs across replicas: durable tasks once per occurrence, plain jobs everywhere,
//! leadership as a value, and fenced locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_coord::{CoordinationConfig, LeadExt};
use botmesh_core::traits::{CheckpointWrite, Store};
use botmesh_core::{Bot, BotError, MemoryStore, Missed, TaskOptions};
use botmesh_testing::{FaultyCoordinator, TestProvider};
use serde_json::json;
use tokio::time::Instant;

use crate::backends::{Backend, Memory, Redis};
use crate::support::PlainStore;

const LEASE: Duration = Duration::from_secs(1);
const EVERY: Duration = Duration::from_millis(200);

on_both_backends!(
    a_durable_task_every_200ms_for_5s_runs_each_occurrence_exactly_once,
    when_the_leader_dies_mid_run_the_next_occurrences_run_on_another_replica,
    a_plain_job_runs_on_every_replica,
    a_holder_frozen_past_its_lock_ttl_has_its_later_write_rejected_by_fence,
    one_replica_leads_a_role_and_dropping_the_lead_gives_it_back,
);

type Runs = Arc<Mutex<Vec<(String, u64, Instant)>>>;

struct Replica {
    bot: Bot,
    coordinator: Arc<FaultyCoordinator>,
}

async fn replica(
    backend: &impl Backend,
    id: &'static str,
    runs: &Runs,
    durable: bool,
    work: Duration,
) -> Replica {
    let coordinator = Arc::new(FaultyCoordinator::new(backend.coordinator(id).await));
    let runs = Arc::clone(runs);
    let job = move |ctx: botmesh_core::JobCtx| {
        let runs = Arc::clone(&runs);
        async move {
            runs.lock().unwrap().push((id.to_owned(), ctx.occurrence(), Instant::now()));
            tokio::time::sleep(work).await;
            Ok::<_, BotError>(())
        }
    };
    let builder = Bot::builder()
        .provider(TestProvider::new())
        .store(backend.store())
        .coordination(CoordinationConfig::new(coordinator.clone()).build());
    let builder = if durable {
        builder.every_with(EVERY, TaskOptions::durable("report"), job)
    } else {
        builder.every(EVERY, job)
    };
    let bot = builder.build().unwrap();
    bot.start().await.unwrap();
    Replica { bot, coordinator }
}

fn occurrences(runs: &Runs) -> Vec<u64> {
    let mut o: Vec<u64> = runs.lock().unwrap().iter().map(|r| r.1).collect();
    o.sort_unstable();
    o
}

async fn a_durable_task_every_200ms_for_5s_runs_each_occurrence_exactly_once(
    backend: &impl Backend,
) {
    let runs: Runs = Arc::default();
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        replicas.push(replica(backend, id, &runs, true, Duration::from_millis(20)).await);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for r in &replicas {
        r.bot.stop().await.unwrap();
    }
    let seen = occurrences(&runs);
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(seen, unique, "no occurrence ran twice");
    assert!((23..=26).contains(&seen.len()), "about 25 occurrences in 5 s, got {}", seen.len());
    assert_eq!(
        seen.last().unwrap() - seen.first().unwrap() + 1,
        seen.len() as u64,
        "none was skipped"
    );
}

async fn when_the_leader_dies_mid_run_the_next_occurrences_run_on_another_replica(
    backend: &impl Backend,
) {
    let runs: Runs = Arc::default();
    let mut replicas = HashMap::new();
    for id in ["a", "b", "c"] {
        replicas.insert(id, replica(backend, id, &runs, true, Duration::from_millis(100)).await);
    }
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let leader = runs.lock().unwrap().last().unwrap().0.clone();
    // Mid-run: the job takes 100 ms and has just started or is about to.
    let killed_at = Instant::now();
    replicas[leader.as_str()].coordinator.crash();
    tokio::time::sleep(LEASE * 4).await;
    for r in replicas.values() {
        r.bot.stop().await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    let after: Vec<_> =
        runs.iter().filter(|r| r.2 > killed_at + LEASE + LEASE / 3 + EVERY).collect();
    assert!(after.len() >= 5, "occurrences go on after the takeover: {}", after.len());
    assert!(after.iter().all(|r| r.0 != leader), "the dead leader runs nothing more");
    let seen: Vec<u64> = {
        let mut o: Vec<u64> = runs.iter().map(|r| r.1).collect();
        o.sort_unstable();
        o
    };
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(seen, unique, "no occurrence ran twice across the takeover");
}

async fn a_plain_job_runs_on_every_replica(backend: &impl Backend) {
    let runs: Runs = Arc::default();
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        replicas.push(replica(backend, id, &runs, false, Duration::ZERO).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for r in &replicas {
        r.bot.stop().await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    for id in ["a", "b", "c"] {
        let n = runs.iter().filter(|r| r.0 == id).count();
        assert!(n >= 4, "replica {id} ran the plain job {n} times in 1 s");
    }
}

/// A resource that remembers the highest fence it saw and refuses anything older: what a
/// database row with a `fence` column and a conditional update does.
#[derive(Default)]
struct FencedResource {
    highest: Mutex<u64>,
    value: Mutex<String>,
}

impl FencedResource {
    fn write(&self, fence: u64, value: &str) -> Result<(), String> {
        let mut highest = self.highest.lock().unwrap();
        if fence < *highest {
            return Err(format!("stale fence {fence} < {highest}"));
        }
        *highest = fence;
        *self.value.lock().unwrap() = value.to_owned();
        Ok(())
    }
}

async fn a_holder_frozen_past_its_lock_ttl_has_its_later_write_rejected_by_fence(
    backend: &impl Backend,
) {
    let store = backend.store();
    let store = store.locks().expect("the backend's store has fenced locks");
    let resource = FencedResource::default();
    let ttl = Duration::from_millis(500);
    let a = store.acquire_lock_fenced("report", ttl).await.unwrap().unwrap();
    // a freezes past its ttl; b takes the lock and writes.
    tokio::time::sleep(ttl * 3).await;
    // b's lock must outlive the rest of the test, however slow the machine.
    let held = Duration::from_secs(60);
    let b =
        store.acquire_lock_fenced("report", held).await.unwrap().expect("the expired lock is free");
    assert!(b.fence > a.fence);
    resource.write(b.fence, "from b").unwrap();
    // a wakes up and tries to finish its critical section.
    assert!(!store.renew_lock("report", &a.token, ttl).await.unwrap(), "a's lock is gone");
    let refused = resource.write(a.fence, "from a").unwrap_err();
    assert!(refused.contains("stale fence"));
    assert_eq!(*resource.value.lock().unwrap(), "from b");
    assert!(store.release_lock("report", &b.token).await.unwrap());
}

async fn one_replica_leads_a_role_and_dropping_the_lead_gives_it_back(backend: &impl Backend) {
    let a = backend.coordinator("a").await;
    let b = backend.coordinator("b").await;
    a.heartbeat(LEASE * 10).await.unwrap();
    b.heartbeat(LEASE * 10).await.unwrap();
    let lead = a.lead("job:report", LEASE).await.unwrap().expect("a leads");
    assert!(b.lead("job:report", LEASE).await.unwrap().is_none(), "only one replica leads");
    let fence = lead.fence();
    assert!(lead.release().await.unwrap());
    let lead_b = b.lead("job:report", LEASE).await.unwrap().expect("b leads once a released");
    assert!(lead_b.fence() > fence);
    drop(lead_b);
    // Dropping gives it back in the background.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(l) = a.lead("job:report", LEASE).await.unwrap() {
            assert!(l.fence() > fence);
            break;
        }
        assert!(Instant::now() < deadline, "a dropped lead was given back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn missed_occurrences_run_once_on_recovery_or_are_skipped() {
    for (missed, expect_catch_up) in [(Missed::RunOnce, true), (Missed::Skip, false)] {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // The last run was long ago: every replica was down since.
        assert!(store.tasks().unwrap().task_claim("report", 1).await.unwrap());
        let caught_up = recover(&store, missed).await;
        assert_eq!(caught_up, expect_catch_up, "{missed:?}");
        let last = store.tasks().unwrap().task_last("report").await.unwrap().unwrap();
        assert!(last > 1, "{missed:?}: the missed occurrences are accounted for");
        let row = store.get_checkpoint("botmesh:task:report").await.unwrap();
        assert!(row.is_none(), "the task record lives apart from checkpoints");
    }
}

/// A minimal custom store of one process: no task records, and no leases either, so its only
/// process leads the task.
#[tokio::test(start_paused = true)]
async fn a_store_without_task_records_keeps_them_in_a_checkpoint_row() {
    let store: Arc<dyn Store> = Arc::new(PlainStore::local());
    assert!(store.tasks().is_none());
    store
        .set_checkpoint(
            "botmesh:task:report",
            &CheckpointWrite::new(json!({"last": 1}).to_string()),
        )
        .await
        .unwrap();
    assert!(recover(&store, Missed::RunOnce).await, "the missed occurrence ran");
    let record = store.get_checkpoint("botmesh:task:report").await.unwrap().unwrap();
    let last =
        serde_json::from_str::<serde_json::Value>(&record.data).unwrap()["last"].as_u64().unwrap();
    assert!(last > 1, "the claim landed in the checkpoint row");
}

/// Starts a bot with the durable task `report` (every minute, `missed`) on `store`, lets it
/// catch up, and stops it; whether the catch-up ran the job.
async fn recover(store: &Arc<dyn Store>, missed: Missed) -> bool {
    let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
    let log = Arc::clone(&runs);
    let bot = Bot::builder()
        .provider(TestProvider::new())
        .store(Arc::clone(store))
        .every_with(
            Duration::from_secs(60),
            TaskOptions::durable("report").missed(missed),
            move |ctx| {
                let log = Arc::clone(&log);
                async move {
                    log.lock().unwrap().push(ctx.occurrence());
                    Ok::<_, BotError>(())
                }
            },
        )
        .build()
        .unwrap();
    bot.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    bot.stop().await.unwrap();
    !runs.lock().unwrap().is_empty()
}
