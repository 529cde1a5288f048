//! The harness's command line.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use botmesh_chaos::check::FaultKind;

pub(crate) const HELP: &str = "\
botmesh-chaos: replica processes, real Redis, injected faults, and a checker

Options (defaults in brackets):
  --replicas N        replica processes [3]
  --chats N           chats sending at once [30]
  --messages N        messages per chat, 0 for as many as fit in --duration [0]
  --duration TIME     how long traffic runs: seconds, or a duration such as 10m [120]
  --faults LIST       comma-separated: kill,stop,client-kill,pause,restart,starve,failover,
                      or all, or none [all]
  --fault-every TIME  time between two faults: seconds, or a duration such as 500ms [6]
  --durability on|off the inbox journal and outbox [on]
  --transport KIND    shared (a webhook every replica serves), exclusive (a polling session
                      on one elected replica at a time) or both (half the chats on each) [shared]
  --wait-replicas on|off
                      grants wait for Redis's replica to have them (WAIT) before anyone acts
                      on them; with failover in the faults, Redis runs as a master, a replica
                      and three Sentinels [off]
  --contend N         busy processes competing with the run for the CPU [0]
  --lease TIME        the replicas' lease: seconds, or a duration such as 1500ms [2s]
  --lease-ms MS       the same in milliseconds
  --out DIR           where histories and report.json go [target/chaos]
  --check DIR         run nothing: check again the run an earlier --out DIR left there
";

/// Which transports the replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A webhook every replica serves: the load generator plays a load balancer.
    Shared,
    /// A polling session, held by one elected replica at a time.
    Exclusive,
    /// Both, each elected on its own: even chats on the webhook, odd ones polled.
    Both,
}

impl Transport {
    /// The name on the command line (the replicas' `--transport` too).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
            Self::Both => "both",
        }
    }

    /// Whether chat `chat` reaches the bot through the polling session.
    pub(crate) const fn polled(self, chat: u32) -> bool {
        match self {
            Self::Shared => false,
            Self::Exclusive => true,
            Self::Both => chat % 2 == 1,
        }
    }
}

pub(crate) struct Options {
    pub(crate) replicas: usize,
    pub(crate) chats: u32,
    pub(crate) messages: u32,
    pub(crate) duration: Duration,
    pub(crate) faults: Vec<FaultKind>,
    pub(crate) fault_every: Duration,
    pub(crate) durability: bool,
    pub(crate) transport: Transport,
    pub(crate) wait_replicas: bool,
    pub(crate) contend: usize,
    pub(crate) lease: Duration,
    pub(crate) out: PathBuf,
    /// A finished run to check again instead of a new run.
    pub(crate) check: Option<PathBuf>,
}

fn on_off(flag: &str, value: &str) -> Result<bool> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        v => bail!("{flag} is on or off, not {v}"),
    }
}

/// The options, or `None` when `--help` was asked for.
pub(crate) fn options() -> Result<Option<Options>> {
    let mut o = Options {
        replicas: 3,
        chats: 30,
        messages: 0,
        duration: Duration::from_secs(120),
        faults: FaultKind::ALL.to_vec(),
        fault_every: Duration::from_secs(6),
        durability: true,
        transport: Transport::Shared,
        wait_replicas: false,
        contend: 0,
        lease: Duration::from_millis(2000),
        out: PathBuf::from("target/chaos"),
        check: None,
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
            "--check" => o.check = Some(value.into()),
            "--durability" => o.durability = on_off(&flag, &value)?,
            "--wait-replicas" => o.wait_replicas = on_off(&flag, &value)?,
            "--contend" => o.contend = usize::try_from(num(&value)?)?,
            "--transport" => {
                o.transport = match value.as_str() {
                    "shared" => Transport::Shared,
                    "exclusive" => Transport::Exclusive,
                    "both" => Transport::Both,
                    v => bail!("--transport is shared, exclusive or both, not {v}"),
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
pub(crate) fn duration(v: &str) -> Result<Duration> {
    if let Ok(secs) = v.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    Ok(humantime::parse_duration(v)?)
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

    #[test]
    fn with_both_transports_odd_chats_are_polled() {
        assert!(!Transport::Both.polled(0) && Transport::Both.polled(1));
        assert!(Transport::Exclusive.polled(0) && !Transport::Shared.polled(1));
    }
}
