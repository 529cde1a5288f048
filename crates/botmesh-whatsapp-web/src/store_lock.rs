//! The lock of a session kept in the bot's store: a safety net under the lease.
//!
//! Only the replica elected for the provider opens the session. Should two ever try at once
//! (a stalled leader waking up after a standby took over), the fenced lock
//! `botmesh:provider:<id>:session:lock` in the store refuses the second. The opener renews it
//! every third of its time to live while the session is open and releases it at `stop`; a
//! process that dies leaves it to run out. The runtime starts the session once per election,
//! so an opener that finds the lock held waits up to the lock's time to live for it (the lock
//! of a replica that died runs out by then) before it gives up.
//!
//! The holder counts its time from when a renewal (or the acquiring) was *sent*: the store
//! keeps the lock at least `ttl` from then. Its [`SessionGuard`] holds until that moment plus
//! `ttl` less a margin ([`margin`]), so a holder that stalled (a long pause, a store that does
//! not answer) refuses its own writes before the lock can have run out in the store, whether
//! or not its renewer ran; a renewal waits for the store no longer than that either. An opener
//! that cannot renew in time has lost the session: its guard is released (its writes to the
//! session's rows are refused from then on) and its transport is closed, so the runtime steps
//! it down.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Error as StoreError, FencedLock, LockStore, Store};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::seam::SessionGuard;

/// How often a held lock is tried again while waiting for it to run out.
const RETRY: Duration = Duration::from_millis(250);

/// The store's fenced locks; [`StoreError::Unsupported`] in a store without them.
fn locks(store: &dyn Store) -> Result<&dyn LockStore, StoreError> {
    store.locks().ok_or(StoreError::Unsupported { op: "fenced locks" })
}

/// The lock's key for the session under `prefix`.
pub(crate) fn lock_key(prefix: &str) -> String {
    format!("{prefix}lock")
}

/// A held lock in the store, renewed until released.
pub(crate) struct StoreLock {
    store: Arc<dyn Store>,
    key: String,
    lock: FencedLock,
    guard: SessionGuard,
    renewer: JoinHandle<()>,
}

impl StoreLock {
    /// Takes the lock of the session under `prefix` for `ttl`, and renews it until released.
    /// `lost` is called once if it could not be renewed in time.
    pub(crate) async fn acquire(
        store: Option<&Arc<dyn Store>>,
        prefix: &str,
        ttl: Duration,
        lost: impl Fn() + Send + Sync + 'static,
    ) -> Result<Self> {
        let store = store.ok_or(Error::NoStore)?;
        let locks = locks(&**store).map_err(|_| Error::NoStore)?;
        let key = lock_key(prefix);
        let until = Instant::now() + ttl;
        let (lock, sent) = loop {
            let sent = Instant::now();
            match locks.acquire_lock_fenced(&key, ttl).await {
                Ok(Some(lock)) => break (lock, sent),
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(RETRY.min(ttl / 4)).await;
                }
                Ok(None) => return Err(Error::SessionLocked { key }),
                Err(StoreError::Unsupported { .. }) => return Err(Error::NoStore),
                Err(source) => return Err(Error::Store { op: "lock the session", source }),
            }
        };
        let guard = SessionGuard::new();
        guard.hold_until(deadline(sent, ttl));
        let renewer = tokio::spawn(renew(
            Arc::clone(store),
            key.clone(),
            lock.token.clone(),
            ttl,
            (guard.clone(), sent),
            lost,
        ));
        Ok(Self { store: Arc::clone(store), key, lock, guard, renewer })
    }

    /// The guard released when the lock is lost or released.
    pub(crate) fn guard(&self) -> SessionGuard {
        self.guard.clone()
    }

    /// Stops renewing and releases the lock.
    pub(crate) async fn release(self) {
        self.renewer.abort();
        self.guard.release();
        let released =
            async { locks(&*self.store)?.release_lock(&self.key, &self.lock.token).await };
        match released.await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: "botmesh", key = self.key, error = %e, "releasing the session's lock failed; it runs out by itself");
            }
        }
    }
}

/// What is kept off the lock's time to live: for the store's clock running a little faster
/// than this one, and for the time a write takes to reach the store once checked.
pub(crate) fn margin(ttl: Duration) -> Duration {
    ttl / 10
}

/// Until when a lock (re)taken by a request sent at `sent` is held, for this holder.
fn deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(margin(ttl))
}

/// Renews the lock every third of `ttl`. A renewal that fails is tried again until the lock
/// would have run out; then, or when the store says another holds it, the lock is lost. No
/// renewal waits for the store past the guard's deadline.
async fn renew(
    store: Arc<dyn Store>,
    key: String,
    token: String,
    ttl: Duration,
    (guard, mut sent): (SessionGuard, Instant),
    lost: impl Fn() + Send + Sync + 'static,
) {
    let period = (ttl / 3).max(Duration::from_millis(10));
    let mut wait = period;
    loop {
        tokio::time::sleep(wait).await;
        let attempt = Instant::now();
        let left = deadline(sent, ttl).saturating_duration_since(attempt);
        let renewed = async { locks(&*store)?.renew_lock(&key, &token, ttl).await };
        match tokio::time::timeout(left, renewed).await {
            Ok(Ok(true)) => {
                sent = attempt;
                guard.hold_until(deadline(sent, ttl));
                wait = period;
                continue;
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) if Instant::now() < deadline(sent, ttl) => {
                tracing::warn!(target: "botmesh", key, error = %e, "renewing the session's lock failed; trying again");
                wait = RETRY.min(period);
                continue;
            }
            Ok(Err(e)) => {
                tracing::warn!(target: "botmesh", key, error = %e, "renewing the session's lock failed until it ran out");
            }
            Err(_) => {
                tracing::warn!(target: "botmesh", key, "the store did not renew the session's lock before it ran out");
            }
        }
        tracing::error!(target: "botmesh", key, "the WhatsApp Web session's lock in the store was lost; closing the transport");
        guard.release();
        lost();
        return;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed expectation is a failed test")]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use botmesh_core::MemoryStore;

    use super::*;

    // Paused time: the clock moves only when every task waits, so a loaded machine changes
    // nothing. The memory store keeps time with tokio's clock.
    #[tokio::test(start_paused = true)]
    async fn a_second_opener_is_refused_until_the_first_releases_and_a_lost_lock_is_reported() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let locks = store.locks().unwrap();
        let ttl = Duration::from_millis(300);
        let first = StoreLock::acquire(Some(&store), "p:", ttl, || {}).await.unwrap();
        tokio::time::sleep(ttl * 2).await;
        assert!(first.guard().is_held(), "renewed, so its deadline moved on");
        let t0 = Instant::now();
        let refused = StoreLock::acquire(Some(&store), "p:", ttl, || {}).await;
        assert!(matches!(refused, Err(Error::SessionLocked { .. })), "renewed, still held");
        assert!(t0.elapsed() >= ttl, "it waited for the lock to run out first");
        let guard = first.guard();
        first.release().await;
        assert!(!guard.is_held());
        let lost = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&lost);
        let second = StoreLock::acquire(Some(&store), "p:", ttl, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap();
        // Someone else takes the lock over (it was forced free): the next renewal fails.
        locks.release_lock(&lock_key("p:"), &second.lock.token).await.unwrap();
        let _thief = locks.acquire_lock_fenced(&lock_key("p:"), ttl).await.unwrap().unwrap();
        tokio::time::sleep(ttl).await;
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert!(!second.guard().is_held(), "a lost lock releases the guard");
        assert!(matches!(StoreLock::acquire(None, "p:", ttl, || {}).await, Err(Error::NoStore)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_lock_of_a_replica_that_died_is_waited_for_until_it_runs_out() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let locks = store.locks().unwrap();
        let ttl = Duration::from_millis(600);
        // A replica took it and died: nobody renews or releases it.
        let _dead = locks.acquire_lock_fenced(&lock_key("p:"), ttl / 2).await.unwrap().unwrap();
        let t0 = Instant::now();
        let lock = StoreLock::acquire(Some(&store), "p:", ttl, || {}).await.unwrap();
        let waited = t0.elapsed();
        assert!(waited >= ttl / 2 && waited < ttl, "taken once it ran out, after {waited:?}");
        lock.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stalls_stops_holding_before_the_lock_runs_out_in_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let locks = store.locks().unwrap();
        let ttl = Duration::from_millis(900);
        let lock = StoreLock::acquire(Some(&store), "p:", ttl, || {}).await.unwrap();
        let guard = lock.guard();
        // Its renewer never runs again (a stalled process, a renewal that hangs).
        lock.renewer.abort();
        tokio::time::sleep(ttl - margin(ttl) - Duration::from_millis(1)).await;
        assert!(guard.is_held(), "held until its deadline");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!guard.is_held(), "past its deadline, its writes are refused");
        let other = locks.acquire_lock_fenced(&lock_key("p:"), ttl).await.unwrap();
        assert!(other.is_none(), "while the store still keeps the lock for it");
    }
}
