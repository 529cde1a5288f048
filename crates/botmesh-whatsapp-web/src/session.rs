//! The session directory and its lock: a safety net under the lease. [`Held`] is the lock an
//! open session holds, this one or the store's (`store_lock.rs`).
//!
//! Only the replica elected for the provider opens the session. Should two ever try at once
//! (a stalled leader waking up after a standby took over, two bots pointed at one directory),
//! the lock file in the directory refuses the second: an exclusive file lock (`flock` on
//! Unix) held from `start` until `stop`, released by the system if the process dies.
//!
//! The runtime starts the session once per election, so an opener that finds the lock held
//! (the old leader still stopping) tries again for a while (the provider's session lock
//! wait) before it gives up.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::seam::SessionGuard;
use crate::store_lock::StoreLock;

/// How often a held lock file is tried again.
const RETRY: Duration = Duration::from_millis(100);

/// The lock file's name in the session directory.
pub const LOCK_FILE: &str = "session.lock";

/// A held session lock. Dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct SessionLock {
    file: File,
    dir: PathBuf,
}

impl SessionLock {
    /// Takes the lock of the session in `dir`, creating the directory if needed.
    pub(crate) fn acquire(dir: &Path) -> Result<Self> {
        let io = |source| Error::SessionDir { dir: dir.to_owned(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::SessionInUse { dir: dir.to_owned() });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // For an operator looking at the directory: who holds it. Not needed for the lock.
        let _ = file.set_len(0).and_then(|()| writeln!(file, "pid {}", std::process::id()));
        Ok(Self { file, dir: dir.to_owned() })
    }

    /// Takes the lock of the session in `dir`, trying again for up to `wait` while another
    /// opener holds it.
    pub(crate) async fn acquire_within(dir: &Path, wait: Duration) -> Result<Self> {
        let until = tokio::time::Instant::now() + wait;
        loop {
            match Self::acquire(dir) {
                Err(Error::SessionInUse { .. }) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(RETRY.min(wait / 4)).await;
                }
                done => return done,
            }
        }
    }

    /// Releases the lock.
    pub(crate) fn release(self) {
        if let Err(e) = self.file.unlock() {
            tracing::warn!(target: "botmesh", dir = %self.dir.display(), error = %e, "unlocking the session failed; closing the file releases it");
        }
    }
}

/// The lock an open session holds: the directory's, or the store's.
pub(crate) enum Held {
    /// The lock file in the session directory, and the guard released with it.
    Dir(SessionLock, SessionGuard),
    /// The fenced lock in the bot's store.
    Store(StoreLock),
}

impl Held {
    /// The lock file of the session in `dir`.
    pub(crate) fn dir(lock: SessionLock) -> Self {
        Self::Dir(lock, SessionGuard::new())
    }

    /// Whether the session is still held, for the connector.
    pub(crate) fn guard(&self) -> SessionGuard {
        match self {
            Self::Dir(_, guard) => guard.clone(),
            Self::Store(lock) => lock.guard(),
        }
    }

    /// Releases the lock.
    pub(crate) async fn release(self) {
        match self {
            Self::Dir(lock, guard) => {
                guard.release();
                lock.release();
            }
            Self::Store(lock) => lock.release().await,
        }
    }
}

/// Whether the session in `dir` is locked by an opener now. Creates nothing: a directory
/// without a lock file is not locked.
pub fn is_locked(dir: &Path) -> bool {
    let Ok(file) = OpenOptions::new().read(true).write(true).open(dir.join(LOCK_FILE)) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_opener_is_refused_until_the_first_releases() {
        let dir = std::env::temp_dir().join(format!("botmesh-wa-lock-{}", std::process::id()));
        let first = SessionLock::acquire(&dir).unwrap();
        assert!(matches!(SessionLock::acquire(&dir), Err(Error::SessionInUse { .. })));
        assert!(is_locked(&dir));
        first.release();
        assert!(!is_locked(&dir));
        let again = SessionLock::acquire(&dir).unwrap();
        drop(again);
        assert!(!is_locked(&dir), "dropping the lock releases it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_second_opener_waits_for_the_first_to_release_within_its_wait() {
        let dir = std::env::temp_dir().join(format!("botmesh-wa-wait-{}", std::process::id()));
        let first = SessionLock::acquire(&dir).unwrap();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            first.release();
        });
        let started = std::time::Instant::now();
        let second = SessionLock::acquire_within(&dir, Duration::from_secs(30)).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250), "it waited for the release");
        releaser.await.unwrap();
        // Held now: a third opener with a short wait is refused once the wait is over.
        let third = SessionLock::acquire_within(&dir, Duration::from_millis(200)).await;
        assert!(matches!(third, Err(Error::SessionInUse { .. })));
        second.release();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
