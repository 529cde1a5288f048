//! `botmesh-chaos`: runs replica processes of the chaos bot on a private `redis-server`, drives
//! webhook traffic at them like a load balancer, injects faults, and checks the history.
//!
//! Run it through `cargo xtask chaos`; `--help` lists the options. It prints a table and writes
//! the same findings to `target/chaos/report.json`, and exits with an error when the run broke
//! a guarantee.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use botmesh_chaos::check::{Acked, Fault, FaultKind, Report, Run, Sent};
use botmesh_chaos::record::{Delivery, PlatformSend, Reply, now_ns, read_history};
use botmesh_testing::RedisServer;
use rand::Rng;
use rand::seq::IndexedRandom;
use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

const HELP: &str = "\
botmesh-chaos: replica processes, real Redis, injected faults, and a checker

Options (defaults in brackets):
  --replicas N        replica processes [3]
  --chats N           chats sending at once [30]
  --messages N        messages per chat, 0 for as many as fit in --duration [0]
  --duration TIME     how long traffic runs: seconds, or a duration such as 10m [120]
  --faults LIST       comma-separated: kill,stop,client-kill,pause,restart, or all, or none [all]
  --fault-every TIME  time between two faults: seconds, or a duration such as 500ms [6]
  --durability on|off the inbox journal and outbox [on]
  --lease TIME        the replicas' lease: seconds, or a duration such as 1500ms [2s]
  --lease-ms MS       the same in milliseconds
  --out DIR           where histories and report.json go [target/chaos]
";

struct Options {
    replicas: usize,
    chats: u32,
    messages: u32,
    duration: Duration,
    faults: Vec<FaultKind>,
    fault_every: Duration,
    durability: bool,
    lease: Duration,
    out: PathBuf,
}

/// The options, or `None` when `--help` was asked for.
fn options() -> Result<Option<Options>> {
    let mut o = Options {
        replicas: 3,
        chats: 30,
        messages: 0,
        duration: Duration::from_secs(120),
        faults: FaultKind::ALL.to_vec(),
        fault_every: Duration::from_secs(6),
        durability: true,
        lease: Duration::from_millis(2000),
        out: PathBuf::from("target/chaos"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            print!("{HELP}");
            return Ok(None);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value; see --help"))?;
        let num = |v: &str| v.parse::<u64>().with_context(|| format!("{flag}: not a number: {v}"));
        let time = |v: &str| duration(v).with_context(|| format!("{flag}: not a duration: {v}"));
        match flag.as_str() {
            "--replicas" => o.replicas = usize::try_from(num(&value)?)?.max(2),
            "--chats" => o.chats = u32::try_from(num(&value)?)?.max(1),
            "--messages" => o.messages = u32::try_from(num(&value)?)?,
            "--duration" => o.duration = time(&value)?,
            "--fault-every" => o.fault_every = time(&value)?.max(Duration::from_secs(1)),
            "--lease" => o.lease = time(&value)?.max(Duration::from_millis(300)),
            "--lease-ms" => o.lease = Duration::from_millis(num(&value)?.max(300)),
            "--out" => o.out = value.into(),
            "--durability" => {
                o.durability = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    v => bail!("--durability is on or off, not {v}"),
                }
            }
            "--faults" => {
                o.faults = match value.as_str() {
                    "all" => FaultKind::ALL.to_vec(),
                    "none" => Vec::new(),
                    list => list
                        .split(',')
                        .map(|n| FaultKind::parse(n).with_context(|| format!("unknown fault {n}")))
                        .collect::<Result<_>>()?,
                }
            }
            _ => bail!("unknown option {flag}; see --help"),
        }
    }
    Ok(Some(o))
}

/// A duration from the command line: bare seconds (`120`), or a duration as configuration
/// files write it (`10m`, `1h 30m`, `500ms`).
fn duration(v: &str) -> Result<Duration> {
    if let Ok(secs) = v.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    Ok(humantime::parse_duration(v)?)
}

fn free_port() -> Result<u16> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A replica process and how to start it again under the same id.
struct Replica {
    id: String,
    port: u16,
    child: Option<Child>,
    command: Vec<String>,
    log: PathBuf,
}

impl Replica {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/webhook", self.port)
    }

    fn spawn(&mut self) -> Result<()> {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let (program, args) = self.command.split_first().context("empty command")?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Sends `signal` with one system call: a `kill` process would take milliseconds to
    /// start, during which the replica goes on taking messages after the fault's moment.
    fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self.pid().context("the replica is not running")?;
        let pid = i32::try_from(pid).ok().and_then(Pid::from_raw).context("not a process id")?;
        kill_process(pid, signal).with_context(|| format!("signalling {pid:?}"))
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// Waits until something answers on `port`.
async fn listening(port: u16, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() > deadline {
            bail!("nothing listens on port {port} after {within:?}");
        }
        sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// What the harness records while the run goes on.
#[derive(Default)]
struct Tape {
    acked: Vec<Acked>,
    sent: Vec<Sent>,
    refused: u64,
    /// Idempotency keys of the sends delivered, and how many repeats they spared the user.
    keys: std::collections::HashSet<String>,
    deduplicated: u64,
}

type Shared = Arc<Mutex<Tape>>;

fn tape(shared: &Shared) -> std::sync::MutexGuard<'_, Tape> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fake platform API: records every send a replica makes. Like the payment and messaging
/// APIs that take one, it delivers a send repeated under the same idempotency key once.
async fn platform_send(
    State(tape_): State<Shared>,
    headers: axum::http::HeaderMap,
    Json(send): Json<PlatformSend>,
) -> StatusCode {
    let t = now_ns();
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(key) = &key {
        let mut tape = tape(&tape_);
        if !tape.keys.insert(key.clone()) {
            tape.deduplicated += 1;
            return StatusCode::OK;
        }
    }
    let chat = send.chat.strip_prefix('c').and_then(|c| c.parse().ok());
    match (chat, Reply::parse(&send.text)) {
        (Some(chat), Some(reply)) => {
            tape(&tape_).sent.push(Sent {
                chat,
                seq: reply.seq,
                kind: reply.kind,
                fence: reply.fence,
                replica: send.replica,
                t,
                key,
            });
            StatusCode::OK
        }
        _ => StatusCode::BAD_REQUEST,
    }
}

/// What chat `chat` types as its message `seq`: a form now and then, else free text.
fn body(seq: u32) -> &'static str {
    match seq % 6 {
        1 => "form",
        2 => "small",
        3 => "two",
        _ => "hello",
    }
}

/// One chat's user, behind a load balancer: each numbered message goes to a random replica and
/// is sent again (to another random one) until a replica acknowledges it; the next message
/// follows shortly after.
async fn user(
    chat: u32,
    messages: u32,
    until: Instant,
    urls: Arc<Vec<(String, String)>>,
    client: reqwest::Client,
    shared: Shared,
) {
    let mut seq = 0;
    while (messages == 0 || seq < messages) && Instant::now() < until {
        let delivery = Delivery { chat, seq, body: body(seq).to_owned() };
        loop {
            let Some((id, url)) = urls.choose(&mut rand::rng()).cloned() else { return };
            let ok = client
                .post(&url)
                .json(&delivery)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                tape(&shared).acked.push(Acked { chat, seq, replica: id, t: now_ns() });
                break;
            }
            tape(&shared).refused += 1;
            let backoff = rand::rng().random_range(50..300);
            sleep(Duration::from_millis(backoff)).await;
        }
        seq += 1;
        let gap = rand::rng().random_range(10..150);
        sleep(Duration::from_millis(gap)).await;
    }
}

/// Injects one fault and returns what was done.
async fn inject(
    kind: FaultKind,
    replicas: &mut [Replica],
    redis: &mut RedisServer,
    lease: Duration,
    t0: u64,
) -> Result<Fault> {
    // When the fault began. A kill or a stop hits one process: its moment is just after the
    // signal went, so that whatever the replica wrote down before it happened before the fault.
    let mut t = now_ns();
    let mut rng = rand::rng();
    let mut target = None;
    match kind {
        FaultKind::Kill => {
            let i = rng.random_range(0..replicas.len());
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
            let i = rng.random_range(0..replicas.len());
            let r = &replicas[i];
            target = Some(r.id.clone());
            r.signal(Signal::STOP)?;
            t = now_ns();
            sleep(lease + lease / 2).await;
            r.signal(Signal::CONT)?;
        }
        FaultKind::ClientKill => {
            redis.cli(&["CLIENT", "KILL", "TYPE", "normal"])?;
            redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"])?;
        }
        FaultKind::Pause => {
            let frozen = lease.mul_f64(rng.random_range(0.25..0.75));
            redis.pause()?;
            sleep(frozen).await;
            redis.resume()?;
        }
        FaultKind::Restart => {
            redis.restart()?;
        }
    }
    let t_end = now_ns();
    Ok(Fault {
        kind,
        replica: target,
        at_ms: (t - t0) / 1_000_000,
        lasted_ms: (t_end - t) / 1_000_000,
        t,
        t_end,
    })
}

fn print_table(report: &Report) {
    let o = &report.outside_guarantees;
    let rows: [(&str, String); 14] = [
        ("durability", if report.durability { "on".into() } else { "off".into() }),
        ("messages_sent", report.messages_sent.to_string()),
        ("messages_handled", report.messages_handled.to_string()),
        ("messages_replied", report.messages_replied.to_string()),
        ("overlaps", report.overlaps.to_string()),
        ("order_violations", report.order_violations.to_string()),
        ("lost", report.lost.to_string()),
        ("lost_allowed", report.lost_allowed.to_string()),
        ("duplicate_handled", report.duplicate_handled.to_string()),
        ("duplicate_sends", report.duplicate_sends.to_string()),
        ("stale_writes", report.stale_writes.to_string()),
        ("takeover_max_ms", report.takeover_max_ms.to_string()),
        ("lease_ms", report.lease_ms.to_string()),
        (
            "outside guarantees",
            format!(
                "lost {}, overlaps {}, order {}, duplicate sends {}, stale writes {}, \
                 sends across stops {}",
                o.lost,
                o.overlaps,
                o.order_violations,
                o.duplicate_sends,
                o.stale_writes,
                o.sends_across_stops
            ),
        ),
    ];
    println!("\n{:<20} value", "figure");
    println!("{:-<20} {:-<40}", "", "");
    for (name, value) in rows {
        println!("{name:<20} {value}");
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for f in &report.faults {
        *counts.entry(f.kind.name()).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_unstable();
    let faults: Vec<String> = counts.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    println!("{:<20} {}", "faults", faults.join(", "));
}

fn replica_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(format!("chaos-replica{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        bail!("{} is missing: build it with cargo build -p botmesh-chaos", path.display());
    }
    Ok(path)
}

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

#[tokio::main]
async fn main() -> Result<()> {
    let Some(o) = options()? else { return Ok(()) };
    let runs = o.out.join("run");
    fresh_dir(&runs)?;
    let mut redis = RedisServer::start().context("starting a private redis-server")?;
    let t0 = now_ns();

    let shared: Shared = Arc::default();
    let platform = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let platform_url = format!("http://{}", platform.local_addr()?);
    let app = Router::new().route("/send", post(platform_send)).with_state(Arc::clone(&shared));
    tokio::spawn(async move { axum::serve(platform, app).await });

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
            redis.url(),
            "--port".into(),
            port.to_string(),
            "--platform".into(),
            platform_url.clone(),
            "--history".into(),
            history.display().to_string(),
            "--lease-ms".into(),
            o.lease.as_millis().to_string(),
            "--durability".into(),
            if o.durability { "on".into() } else { "off".into() },
        ];
        let log = runs.join(format!("{id}.log"));
        let mut replica = Replica { id, port, child: None, command, log };
        replica.spawn()?;
        replicas.push(replica);
    }
    for r in &replicas {
        listening(r.port, Duration::from_secs(60)).await?;
    }
    println!(
        "chaos: {} replicas, {} chats, {}s, durability {}, lease {} ms, faults {:?}",
        o.replicas,
        o.chats,
        o.duration.as_secs(),
        if o.durability { "on" } else { "off" },
        o.lease.as_millis(),
        o.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
    );

    let urls: Arc<Vec<(String, String)>> =
        Arc::new(replicas.iter().map(|r| (r.id.clone(), r.url())).collect());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let until = Instant::now() + o.duration;
    let users: Vec<_> = (0..o.chats)
        .map(|chat| {
            tokio::spawn(user(
                chat,
                o.messages,
                until,
                Arc::clone(&urls),
                client.clone(),
                Arc::clone(&shared),
            ))
        })
        .collect();

    // Faults, cycling through the chosen kinds, until the traffic stops.
    let mut faults = Vec::new();
    let mut next = 0;
    sleep(o.fault_every.min(Duration::from_secs(5))).await;
    while !o.faults.is_empty() && Instant::now() + o.fault_every / 2 < until {
        let kind = o.faults[next % o.faults.len()];
        next += 1;
        let fault = inject(kind, &mut replicas, &mut redis, o.lease, t0).await?;
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

    // Drain: wait until every acknowledged message is answered, or nothing moved for a while
    // (a message that is gone stays gone).
    let quiet = o.lease * 4 + Duration::from_secs(5);
    let mut last = (0, Instant::now());
    loop {
        let (replied, open) = {
            let t = tape(&shared);
            let replied: std::collections::HashSet<(u32, u32)> =
                t.sent.iter().map(|s| (s.chat, s.seq)).collect();
            (t.sent.len(), t.acked.iter().filter(|a| !replied.contains(&(a.chat, a.seq))).count())
        };
        if open == 0 {
            break;
        }
        if replied != last.0 {
            last = (replied, Instant::now());
        } else if last.1.elapsed() > quiet {
            println!("  drain: {open} messages still unanswered after {quiet:?} without progress");
            break;
        }
        sleep(Duration::from_millis(200)).await;
    }
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
    let (acked, sent, refused, deduplicated) = {
        let mut t = tape(&shared);
        (std::mem::take(&mut t.acked), std::mem::take(&mut t.sent), t.refused, t.deduplicated)
    };
    dump(&runs.join("acked.jsonl"), &acked)?;
    dump(&runs.join("sent.jsonl"), &sent)?;
    let run = Run {
        acked,
        sent,
        history,
        faults,
        lease_ms: u64::try_from(o.lease.as_millis())?,
        durability: o.durability,
        t0,
    };
    let mut report = run.check();
    report.deliveries_refused = refused;
    report.sends_deduplicated = deduplicated;
    print_table(&report);
    println!("{:<20} {refused}", "deliveries_refused");
    println!("{:<20} {deduplicated}", "sends_deduplicated");
    let json = serde_json::to_string_pretty(&report)?;
    let path = o.out.join("report.json");
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    println!("report: {}", path.display());
    if report.violations() > 0 {
        bail!("{} violations inside the guarantees", report.violations());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_or_humantime() {
        assert_eq!(duration("120").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("120s").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(duration("soon").is_err());
        assert!(duration("-5").is_err());
    }
}
