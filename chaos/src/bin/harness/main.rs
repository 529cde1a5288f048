//! `botmesh-chaos`: runs replica processes of the chaos bot on a private `redis-server`, drives
//! traffic at them (webhook deliveries like a load balancer, a polling session on the elected
//! replica, or both), injects faults, and checks the history.
//!
//! Run it through `cargo xtask chaos`; `--help` lists the options. It prints a table and writes
//! the same findings to `target/chaos/report.json`, and exits with an error when the run broke
//! a guarantee.
//!
//! - `options.rs`: the command line;
//! - `process.rs`: the replica processes, and busy processes that compete for the CPU;
//! - `platform.rs`: the fake messaging platform (replies, the polling transport) and what it
//!   writes down;
//! - `users.rs`: the load generator;
//! - `redis.rs`: the private Redis, alone or under Sentinel;
//! - `faults.rs`: the faults;
//! - `table.rs`: the report as a table.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use botmesh_chaos::check::{FaultKind, Report, Run};
use botmesh_chaos::record::{now_ns, read_history};
use rustix::process::Signal;
use tokio::time::{Instant, sleep};

mod faults;
mod options;
mod platform;
mod process;
mod redis;
mod table;
mod users;

use options::{Options, options};
use platform::Platform;
use process::{Contenders, Replica, free_port, listening, replica_binary};
use redis::Redis;
use users::{Via, user};

/// Writes `items` as JSON lines, for a closer look after the run.
fn dump<T: serde::Serialize>(path: &Path, items: &[T]) -> Result<()> {
    let mut text = String::new();
    for item in items {
        text.push_str(&serde_json::to_string(item)?);
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Starts the replica processes, numbered from 1, and waits until each serves.
async fn replicas(o: &Options, redis: &str, platform: &str, runs: &Path) -> Result<Vec<Replica>> {
    let binary = replica_binary()?;
    let mut replicas = Vec::new();
    for i in 0..o.replicas {
        let id = format!("r{}", i + 1);
        let port = free_port()?;
        let history = runs.join(format!("{id}.jsonl"));
        let command = vec![
            binary.display().to_string(),
            "--id".into(),
            id.clone(),
            "--redis".into(),
            redis.to_owned(),
            "--port".into(),
            port.to_string(),
            "--platform".into(),
            platform.to_owned(),
            "--history".into(),
            history.display().to_string(),
            "--lease-ms".into(),
            o.lease.as_millis().to_string(),
            "--durability".into(),
            if o.durability { "on".into() } else { "off".into() },
            "--transport".into(),
            o.transport.name().into(),
            "--wait-replicas".into(),
            if o.wait_replicas { "on".into() } else { "off".into() },
        ];
        let log = runs.join(format!("{id}.log"));
        let mut replica = Replica { id, port, child: None, command, log };
        replica.spawn()?;
        replicas.push(replica);
    }
    for r in &replicas {
        listening(r.port, Duration::from_secs(60)).await?;
    }
    Ok(replicas)
}

/// Waits until every acknowledged message is answered, or nothing moved for a while (a message
/// that is gone stays gone).
async fn drain(platform: &Platform, lease: Duration) {
    let quiet = lease * 4 + Duration::from_secs(5);
    let mut last = (0, Instant::now());
    loop {
        let (replied, open) = {
            let t = platform.tape();
            let replied: std::collections::HashSet<(u32, u32)> =
                t.sent.iter().map(|s| (s.chat, s.seq)).collect();
            (t.sent.len(), t.acked.iter().filter(|a| !replied.contains(&(a.chat, a.seq))).count())
        };
        if open == 0 {
            return;
        }
        if replied != last.0 {
            last = (replied, Instant::now());
        } else if last.1.elapsed() > quiet {
            println!("  drain: {open} messages still unanswered after {quiet:?} without progress");
            return;
        }
        sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let Some(o) = options()? else { return Ok(()) };
    if let Some(dir) = &o.check {
        return check_again(dir);
    }
    let runs = o.out.join("run");
    fresh_dir(&runs)?;
    // Sentinel only when the run needs it: a failover, or a replica for grants to wait for.
    let sentinel = o.wait_replicas || o.faults.contains(&FaultKind::Failover);
    let mut redis = Redis::start(sentinel, o.wait_replicas)?;
    let t0 = now_ns();

    let platform = Arc::new(Platform::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let platform_url = format!("http://{}", listener.local_addr()?);
    let app = platform.router();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut replicas = replicas(&o, &redis.url(), &platform_url, &runs).await?;
    let _contenders = Contenders::start(o.contend)?;
    println!(
        "chaos: {} replicas, {} chats, {}s, durability {}, transport {}, lease {} ms, \
         Redis {}, {} busy processes, faults {:?}",
        o.replicas,
        o.chats,
        o.duration.as_secs(),
        if o.durability { "on" } else { "off" },
        o.transport.name(),
        o.lease.as_millis(),
        match (sentinel, o.wait_replicas) {
            (false, _) => "alone",
            (true, false) => "with Sentinel",
            (true, true) => "with Sentinel, grants waiting for the replica",
        },
        o.contend,
        o.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
    );

    let urls: Arc<Vec<(String, String)>> =
        Arc::new(replicas.iter().map(|r| (r.id.clone(), r.url())).collect());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let until = Instant::now() + o.duration;
    let users: Vec<_> = (0..o.chats)
        .map(|chat| {
            let via = match o.transport.polled(chat) {
                true => Via::Polled,
                false => Via::Webhook { replicas: Arc::clone(&urls), client: client.clone() },
            };
            tokio::spawn(user(chat, o.messages, until, via, Arc::clone(&platform)))
        })
        .collect();

    // Faults, cycling through the chosen kinds, until the traffic stops.
    let mut faults = Vec::new();
    // A fault that could not be injected (the topology did not come back) ends the faults,
    // not the run: what happened until then is still checked, and the run fails after.
    let mut broken = None;
    let mut next = 0;
    sleep(o.fault_every.min(Duration::from_secs(5))).await;
    while !o.faults.is_empty() && Instant::now() + o.fault_every / 2 < until {
        let kind = o.faults[next % o.faults.len()];
        next += 1;
        let holder = platform.holder();
        let fault =
            match faults::inject(kind, &mut replicas, holder.as_deref(), &mut redis, o.lease, t0)
                .await
            {
                Ok(fault) => fault,
                Err(e) => {
                    println!("  injecting {} failed, no more faults: {e:#}", kind.name());
                    broken = Some(e.context(format!("injecting {}", kind.name())));
                    break;
                }
            };
        println!(
            "  {:>6} ms  {:<12} {}",
            fault.at_ms,
            kind.name(),
            fault.replica.as_deref().unwrap_or("")
        );
        faults.push(fault);
        sleep(o.fault_every).await;
    }
    for u in users {
        let _ = u.await;
    }
    drain(&platform, o.lease).await;
    // A moment more for late duplicates, then stop everything.
    sleep(o.lease).await;
    for r in &replicas {
        let _ = r.signal(Signal::CONT);
        let _ = r.signal(Signal::INT);
    }
    sleep(Duration::from_secs(2)).await;
    for r in &mut replicas {
        r.kill().await;
    }

    let mut history = Vec::new();
    for r in &replicas {
        history.extend(read_history(&runs.join(format!("{}.jsonl", r.id)))?);
    }
    let (acked, sent, sessions, polls, refused, deduplicated) = {
        let mut t = platform.tape();
        (
            std::mem::take(&mut t.acked),
            std::mem::take(&mut t.sent),
            std::mem::take(&mut t.sessions),
            std::mem::take(&mut t.polls),
            t.refused,
            t.deduplicated,
        )
    };
    let run = Run {
        acked,
        sent,
        history,
        faults,
        sessions,
        polls,
        lease_ms: u64::try_from(o.lease.as_millis())?,
        durability: o.durability,
        wait_replicas: o.wait_replicas,
        t0,
    };
    keep(&runs, &run)?;
    let mut report = run.check();
    report.deliveries_refused = refused;
    report.sends_deduplicated = deduplicated;
    conclude(&report, &o.out)?;
    broken.map_or(Ok(()), Err)
}

/// Leaves the run's accounts in `runs`, for a closer look and for `--check`.
fn keep(runs: &Path, run: &Run) -> Result<()> {
    dump(&runs.join("acked.jsonl"), &run.acked)?;
    dump(&runs.join("sent.jsonl"), &run.sent)?;
    dump(&runs.join("sessions.jsonl"), &run.sessions)?;
    dump(&runs.join("polls.jsonl"), &run.polls)?;
    dump(&runs.join("faults.jsonl"), &run.faults)?;
    let settings = serde_json::to_vec_pretty(&run.settings())?;
    std::fs::write(runs.join("settings.json"), settings).context("writing settings.json")
}

/// Prints `report`, writes it to `out/report.json`, and fails on a violation inside the
/// guarantees.
fn conclude(report: &Report, out: &Path) -> Result<()> {
    table::print(report);
    let json = serde_json::to_string_pretty(report)?;
    let path = out.join("report.json");
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    println!("report: {}", path.display());
    if report.violations() > 0 {
        bail!("{} violations inside the guarantees", report.violations());
    }
    Ok(())
}

/// Checks again the run left in `dir` (what `--out` was), with this build's checker; the
/// harness's own counts come from the report it wrote then.
fn check_again(dir: &Path) -> Result<()> {
    let run = Run::read(&dir.join("run")).with_context(|| format!("reading {}", dir.display()))?;
    let mut report = run.check();
    if let Ok(old) = std::fs::read(dir.join("report.json"))
        && let Ok(old) = serde_json::from_slice::<serde_json::Value>(&old)
    {
        let count = |k: &str| old.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        report.deliveries_refused = count("deliveries_refused");
        report.sends_deduplicated = count("sends_deduplicated");
    }
    conclude(&report, dir)
}
