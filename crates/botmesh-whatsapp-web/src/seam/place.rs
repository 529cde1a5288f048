//! Where a session's keys live, and the guard that tells a connector whether this opener
//! still holds the session.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

/// Where a linked device's session (its keys) is kept.
///
/// A path converts into [`Session::Dir`], so `WhatsAppWebProvider::new("/var/lib/bot/wa")`
/// keeps the session in that directory; `WhatsAppWebProvider::new(Session::Store)` (or
/// `WhatsAppWebProvider::in_store()`) keeps it in the bot's shared store.
///
/// In a configuration file (`serde` feature): `{ dir = "/var/lib/bot/wa" }` or `"store"`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Session {
    /// In this directory, on a volume every replica reaches. A lock file in it refuses a
    /// second opener.
    Dir(PathBuf),
    /// In the bot's shared store (Redis, Postgres, ...), as rows under
    /// `botmesh:provider:<id>:session:`, so that replicas need no shared volume. A fenced
    /// lock in the store, renewed while the session is open, refuses a second opener.
    Store,
}

impl Session {
    /// The session directory, when the session is kept in one.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Self::Dir(dir) => Some(dir),
            Self::Store => None,
        }
    }

    /// Whether the session is kept in the bot's store.
    pub fn in_store(&self) -> bool {
        matches!(self, Self::Store)
    }
}

impl From<PathBuf> for Session {
    fn from(dir: PathBuf) -> Self {
        Self::Dir(dir)
    }
}

impl From<&PathBuf> for Session {
    fn from(dir: &PathBuf) -> Self {
        Self::Dir(dir.clone())
    }
}

impl From<&Path> for Session {
    fn from(dir: &Path) -> Self {
        Self::Dir(dir.to_owned())
    }
}

impl From<String> for Session {
    fn from(dir: String) -> Self {
        Self::Dir(dir.into())
    }
}

impl From<&str> for Session {
    fn from(dir: &str) -> Self {
        Self::Dir(dir.into())
    }
}

impl From<&String> for Session {
    fn from(dir: &String) -> Self {
        Self::Dir(dir.into())
    }
}

/// Whether the opener of a session still holds it: held from the provider's `start` until
/// its `stop`, or until the lock in the store was lost (a stalled leader whose lock ran out).
/// A connector that keeps the session in the store refuses to write once it is not held, so
/// a stale leader cannot overwrite the keys of the one that took over. A lock in the store
/// also gives it a deadline (renewed with the lock): past it the session is not held, even
/// before the renewer has noticed. Clones share it.
#[derive(Debug, Clone)]
pub struct SessionGuard(Arc<GuardState>);

#[derive(Debug)]
struct GuardState {
    held: AtomicBool,
    deadline: Mutex<Option<Instant>>,
}

impl Default for SessionGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionGuard {
    /// A guard that is held, with no deadline.
    pub fn new() -> Self {
        Self(Arc::new(GuardState { held: AtomicBool::new(true), deadline: Mutex::new(None) }))
    }

    fn deadline(&self) -> MutexGuard<'_, Option<Instant>> {
        // No code that can panic runs under this lock.
        self.0.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the session is still held: not released, and its deadline not passed.
    pub fn is_held(&self) -> bool {
        self.0.held.load(Ordering::SeqCst) && self.deadline().is_none_or(|d| Instant::now() < d)
    }

    /// Holds the session until `deadline` at most (moved on by each renewal of its lock).
    pub(crate) fn hold_until(&self, deadline: Instant) {
        *self.deadline() = Some(deadline);
    }

    /// Marks the session as no longer held, for every clone.
    pub fn release(&self) {
        self.0.held.store(false, Ordering::SeqCst);
    }
}
