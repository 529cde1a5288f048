//! Watching the incarnations waiters wait behind: a holder that dies announces nothing, so its
//! liveness key is read when it would run out (its `PTTL` says when) and at least every
//! second, once per incarnation whatever the number of chats waiting behind it. Found gone, its waiters are woken to take
//! the turn over. This, with the wake channel, is what lets a waiter wait without polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::lock;
use crate::conn::Conn;
use crate::keys::Keys;

/// How long after its key's time to live ran out a holder is read again: a renewal just
/// before the end is then seen.
const MARGIN: Duration = Duration::from_millis(5);

/// The longest wait between two reads of an incarnation: one whose key's time to live was
/// shortened since (a last heartbeat with a shorter lease) is still found gone within it.
const RECHECK: Duration = Duration::from_secs(1);

struct Watched {
    /// Woken when the incarnation is found gone.
    gone: Arc<Notify>,
    /// The waiters watching it. At none, the entry stays until its next read comes due (then
    /// it goes, unread), so that the next waiter behind the same incarnation, a moment later,
    /// needs no read of its own.
    waiters: usize,
    /// When to read its liveness next.
    check_at: Instant,
}

/// The incarnations waited behind.
#[derive(Default)]
pub(super) struct Watch {
    watched: Mutex<HashMap<String, Watched>>,
    /// Woken when an incarnation is added.
    added: Notify,
}

impl Watch {
    /// Watches `incarnation` for a waiter, until the guard is dropped.
    pub(super) fn watch(self: &Arc<Self>, incarnation: &str) -> WatchGuard {
        let mut watched = lock(&self.watched);
        let entry = watched.entry(incarnation.to_owned()).or_insert_with(|| {
            // Read at once: the holder may have died before this waiter came.
            self.added.notify_one();
            Watched { gone: Arc::new(Notify::new()), waiters: 0, check_at: Instant::now() }
        });
        entry.waiters += 1;
        WatchGuard {
            watch: Arc::clone(self),
            incarnation: incarnation.to_owned(),
            gone: Arc::clone(&entry.gone),
        }
    }

    /// Reads the liveness of the incarnations due, as long as the coordinator lives.
    pub(super) async fn run(self: Arc<Self>, conn: Conn, keys: Keys) {
        loop {
            let next = lock(&self.watched).values().map(|w| w.check_at).min();
            match next {
                Some(at) => {
                    tokio::select! {
                        () = self.added.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.added.notified().await,
            }
            let now = Instant::now();
            let due: Vec<String> = {
                let mut watched = lock(&self.watched);
                // Nobody waits behind these any more.
                watched.retain(|_, w| w.waiters > 0 || w.check_at > now);
                watched.iter().filter(|(_, w)| w.check_at <= now).map(|(i, _)| i.clone()).collect()
            };
            if due.is_empty() {
                continue;
            }
            let reads = due.iter().map(|inc| {
                let key = format!("{}{inc}", Keys::alive_prefix(&keys.shard(inc)));
                let mut conn = conn.clone();
                async move { redis::cmd("PTTL").arg(key).query_async::<i64>(&mut conn).await }
            });
            let ttls = join_all(reads).await;
            let now = Instant::now();
            let mut watched = lock(&self.watched);
            for (inc, ttl) in due.iter().zip(ttls) {
                let Some(w) = watched.get_mut(inc) else { continue };
                w.check_at = match ttl {
                    // Gone: its waiters look again, and learn who holds the turn now.
                    Ok(-2) => {
                        w.gone.notify_waiters();
                        now + RECHECK
                    }
                    Ok(ms) if ms >= 0 => {
                        now + (Duration::from_millis(ms.unsigned_abs()) + MARGIN).min(RECHECK)
                    }
                    // A key without expiry, or an error: read again later.
                    Ok(_) | Err(_) => now + RECHECK,
                };
            }
        }
    }
}

/// A waiter's watch of one incarnation, ended when dropped.
pub(super) struct WatchGuard {
    watch: Arc<Watch>,
    incarnation: String,
    /// Woken when the incarnation is found gone.
    pub(super) gone: Arc<Notify>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(w) = lock(&self.watch.watched).get_mut(&self.incarnation) {
            w.waiters = w.waiters.saturating_sub(1);
        }
    }
}
