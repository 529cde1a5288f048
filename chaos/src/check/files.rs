//! A run's accounts as the harness leaves them on disk (`DIR/run/`), and reading them back, so
//! that a run can be checked again (`botmesh-chaos --check DIR`) after the checker changed or
//! to look closer at what it found.

use std::io;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::input::Run;
use crate::record::read_history;

/// How a run was set up, as far as the checker needs to know (`settings.json`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Settings {
    /// The lease the replicas ran with, in ms.
    pub lease_ms: u64,
    /// Whether durability was on.
    pub durability: bool,
    /// Whether grants waited for Redis's replica.
    pub wait_replicas: bool,
    /// When the run started, on the monotonic clock.
    pub t0: u64,
}

/// Reads JSON lines, skipping none: a line that does not parse is an error.
fn lines<T: DeserializeOwned>(path: &Path) -> io::Result<Vec<T>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(io::Error::other))
        .collect()
}

impl Run {
    /// Reads back the run the harness left in `runs` (its `run/` directory): the harness's
    /// accounts, the faults, the settings, and the history of every replica (`r*.jsonl`).
    pub fn read(runs: &Path) -> io::Result<Self> {
        let settings: Settings =
            serde_json::from_slice(&std::fs::read(runs.join("settings.json"))?)
                .map_err(io::Error::other)?;
        let mut history = Vec::new();
        let mut replicas: Vec<_> = std::fs::read_dir(runs)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                name.starts_with('r') && name.ends_with(".jsonl")
            })
            .collect();
        replicas.sort();
        for path in replicas {
            history.extend(read_history(&path)?);
        }
        Ok(Self {
            acked: lines(&runs.join("acked.jsonl"))?,
            sent: lines(&runs.join("sent.jsonl"))?,
            history,
            faults: lines(&runs.join("faults.jsonl"))?,
            sessions: lines(&runs.join("sessions.jsonl"))?,
            polls: lines(&runs.join("polls.jsonl"))?,
            lease_ms: settings.lease_ms,
            durability: settings.durability,
            wait_replicas: settings.wait_replicas,
            t0: settings.t0,
        })
    }

    /// How this run was set up.
    pub fn settings(&self) -> Settings {
        Settings {
            lease_ms: self.lease_ms,
            durability: self.durability,
            wait_replicas: self.wait_replicas,
            t0: self.t0,
        }
    }
}
