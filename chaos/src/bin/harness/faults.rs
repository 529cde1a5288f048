//! The faults the harness injects, one at a time.

use std::time::Duration;

use anyhow::Result;
use botmesh_chaos::check::{Fault, FaultKind};
use botmesh_chaos::record::now_ns;
use rand::Rng;
use rustix::process::Signal;
use tokio::time::{Instant, sleep};

use crate::process::{Replica, listening};
use crate::redis::Redis;

/// Which replica a fault of one replica hits: at random, or, half the time, `holder` (the
/// replica polling the exclusive transport, when it runs), so that its takeover is exercised
/// as often as the rest.
fn pick(replicas: &[Replica], holder: Option<&str>) -> usize {
    let mut rng = rand::rng();
    let held = holder.and_then(|h| replicas.iter().position(|r| r.id == h));
    match held {
        Some(i) if rng.random_bool(0.5) => i,
        _ => rng.random_range(0..replicas.len()),
    }
}

/// Injects one fault of `kind` and returns what was done.
pub(crate) async fn inject(
    kind: FaultKind,
    replicas: &mut [Replica],
    holder: Option<&str>,
    redis: &mut Redis,
    lease: Duration,
    t0: u64,
) -> Result<Fault> {
    // When the fault began. A kill or a stop hits one process: its moment is just after the
    // signal went, so that whatever the replica wrote down before it happened before the fault.
    let mut t = now_ns();
    let mut rng = rand::rng();
    let mut target = None;
    let mut bursts = Vec::new();
    match kind {
        FaultKind::Kill => {
            let i = pick(replicas, holder);
            let r = &mut replicas[i];
            target = Some(r.id.clone());
            r.kill().await;
            t = now_ns();
            let down = rng.random_range(300..2000);
            sleep(Duration::from_millis(down)).await;
            r.spawn()?;
            listening(r.port, Duration::from_secs(30)).await?;
        }
        FaultKind::Stop => {
            let i = pick(replicas, holder);
            let r = &replicas[i];
            target = Some(r.id.clone());
            r.signal(Signal::STOP)?;
            t = now_ns();
            sleep(lease + lease / 2).await;
            r.signal(Signal::CONT)?;
        }
        FaultKind::Starve => {
            // A noisy neighbour: for two leases the replica runs a fifth of the time or less,
            // in slices of 10 to 40 ms between stops of 40 to 160 ms.
            let i = pick(replicas, holder);
            let r = &replicas[i];
            target = Some(r.id.clone());
            let until = Instant::now() + lease * 2;
            while Instant::now() < until {
                r.signal(Signal::STOP)?;
                let stopped = now_ns();
                sleep(Duration::from_millis(rng.random_range(40..160))).await;
                r.signal(Signal::CONT)?;
                bursts.push((stopped, now_ns()));
                sleep(Duration::from_millis(rng.random_range(10..40))).await;
            }
            t = bursts.first().map_or(t, |b| b.0);
        }
        FaultKind::ClientKill => redis.kill_clients()?,
        FaultKind::Pause => {
            let frozen = redis.longest_pause(lease.mul_f64(rng.random_range(0.25..0.75)));
            redis.pause(frozen).await?;
        }
        FaultKind::Restart => redis.restart()?,
        FaultKind::Failover => redis.failover()?,
    }
    let t_end = now_ns();
    Ok(Fault {
        kind,
        replica: target,
        at_ms: (t - t0) / 1_000_000,
        lasted_ms: (t_end - t) / 1_000_000,
        t,
        t_end,
        bursts,
    })
}
