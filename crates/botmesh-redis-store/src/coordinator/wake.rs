//! Waking a waiting ticket: a release that hands a chat's turn to a ticket of this
//! incarnation publishes the grant on the incarnation's channel; the subscriber puts it where
//! the ticket's waiter picks it up, and wakes the waiter. Through Sentinel, the subscription
//! follows the master: it is made again wherever the sentinels name it after a move.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_traits::{ChatKey, TurnGrant};
use futures_util::StreamExt;
use tokio::sync::{Notify, watch};

use super::{RedisCoordinator, lock};
use crate::conn::Source;
use crate::conn::backoff;

/// Local waiters, woken when a release hands a turn to one of this incarnation's tickets.
#[derive(Default)]
pub(super) struct Waiters {
    pub(super) map: Mutex<HashMap<ChatKey, (Arc<Notify>, usize)>>,
    /// Turns handed over through the channel, by chat key and ticket, not yet picked up.
    pub(super) granted: Mutex<HashMap<(ChatKey, u64), TurnGrant>>,
    /// Whether the wake channel is subscribed right now; waiters poll fast only when not.
    pub(super) subscribed: std::sync::atomic::AtomicBool,
    /// The incarnation each ticket taken without its turn waits behind, as its take saw it,
    /// until its waiter starts.
    pub(super) holders: Mutex<HashMap<(ChatKey, u64), String>>,
    /// Whether a grant heard of outside the waiter's own calls (on the channel, in the reply
    /// to a withdrawal) must be confirmed by a look of the waiter's, which waits for the
    /// replicas: such a grant was made by another connection's call, which may not have
    /// reached them yet (see `replicas.rs`). It is then noted in `heard`, not in `granted`,
    /// and the waiter woken.
    confirm: bool,
    /// Tickets heard to be granted, to confirm (see `confirm`): a waiter that starts after
    /// the news looks at once instead of a lease later.
    pub(super) heard: Mutex<HashSet<(ChatKey, u64)>>,
}

impl Waiters {
    /// Waiters that confirm grants heard of from elsewhere, or not (see `confirm`).
    pub(super) fn confirming(confirm: bool) -> Self {
        Self { confirm, ..Self::default() }
    }

    pub(super) fn register(self: &Arc<Self>, key: &ChatKey) -> WaiterGuard {
        let mut map = lock(&self.map);
        let entry = map.entry(key.clone()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        WaiterGuard { waiters: Arc::clone(self), key: key.clone(), notify: Arc::clone(&entry.0) }
    }

    pub(super) fn wake(&self, key: &ChatKey) {
        if let Some((notify, _)) = lock(&self.map).get(key) {
            notify.notify_waiters();
        }
    }

    /// Delivers a turn a script handed to another ticket of this incarnation (`seq, fence,
    /// prev, passed over` at the front of `rest`): it waits in the granted map for that
    /// ticket's waiter, which is woken.
    pub(super) fn deliver(&self, key: &ChatKey, rest: &[String]) {
        if let [seq, fence, prev, passed, ..] = rest
            && !seq.is_empty()
            && let Ok(grant) = RedisCoordinator::grant(key, seq, fence, prev, passed)
        {
            lock(&self.granted).insert((key.clone(), grant.seq), grant);
            self.wake(key);
        }
    }

    /// Delivers a grant heard of outside the waiter's own calls (see `confirm`): as
    /// [`deliver`](Self::deliver) does, or, when it must be confirmed, only wakes the waiter,
    /// which looks for itself.
    pub(super) fn deliver_heard(&self, key: &ChatKey, rest: &[String]) {
        if !self.confirm {
            return self.deliver(key, rest);
        }
        if let Some(seq) = rest.first().and_then(|seq| seq.parse().ok()) {
            self.hear(key, seq);
        }
    }

    /// Notes that ticket `seq` of `key` was heard to be granted, to confirm, and wakes its
    /// waiter.
    fn hear(&self, key: &ChatKey, seq: u64) {
        lock(&self.heard).insert((key.clone(), seq));
        self.wake(key);
    }

    /// Forgets what was delivered or heard for ticket `seq` of `key`: its turn was taken, or
    /// it was withdrawn.
    pub(super) fn forget(&self, key: &ChatKey, seq: u64) {
        let id = (key.clone(), seq);
        lock(&self.granted).remove(&id);
        lock(&self.heard).remove(&id);
    }

    pub(super) fn wake_all(&self) {
        for (notify, _) in lock(&self.map).values() {
            notify.notify_waiters();
        }
    }
}

/// A waiter registered for a chat key, unregistered when dropped.
pub(super) struct WaiterGuard {
    waiters: Arc<Waiters>,
    key: ChatKey,
    pub(super) notify: Arc<Notify>,
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        let mut map = lock(&self.waiters.map);
        if let Some(entry) = map.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// A hand-over message: chat key, ticket, fence, previous holder and the incarnations passed
/// over, one per line.
pub(super) fn parse_handover(payload: &str) -> Option<TurnGrant> {
    let mut parts = payload.split('\n');
    let key = parts.next()?;
    let seq = parts.next()?.parse().ok()?;
    let fence = parts.next()?.parse().ok()?;
    let prev = parts.next().filter(|p| !p.is_empty()).map(str::to_owned);
    let passed = passed_over(parts.next().unwrap_or_default());
    Some(TurnGrant::new(key, seq, fence, prev).with_passed_over(passed))
}

/// The incarnations a grant passed over, from their comma-separated list.
pub(super) fn passed_over(list: &str) -> Vec<String> {
    list.split(',').filter(|i| !i.is_empty()).map(str::to_owned).collect()
}

/// Subscribes to this incarnation's hand-over channel for as long as the coordinator lives,
/// subscribing again with the coordinator's backoff after a drop, or at once when the master
/// moved (through Sentinel); waiters poll meanwhile.
pub(super) async fn subscriber(source: Source, channel: String, waiters: Arc<Waiters>) {
    let mut waits = backoff();
    let mut moved = source.moved();
    loop {
        // Moves before this subscription are behind it.
        if let Some(moved) = moved.as_mut() {
            moved.borrow_and_update();
        }
        if let Ok(mut pubsub) = source.pubsub().await
            && pubsub.subscribe(&channel).await.is_ok()
        {
            // Subscribed: a later drop starts again from the shortest wait.
            waits = backoff();
            // Anything published while we were away is covered by waking everyone once.
            waiters.subscribed.store(true, std::sync::atomic::Ordering::SeqCst);
            waiters.wake_all();
            let mut messages = pubsub.into_on_message();
            loop {
                let msg = tokio::select! {
                    msg = messages.next() => msg,
                    () = changed(moved.as_mut()) => {
                        // The master moved: this subscription is on the old one.
                        waits = backoff();
                        None
                    }
                };
                let Some(msg) = msg else { break };
                let Some(grant) =
                    msg.get_payload::<String>().ok().as_deref().and_then(parse_handover)
                else {
                    continue;
                };
                let key = grant.key.clone();
                if waiters.confirm {
                    waiters.hear(&key, grant.seq);
                } else {
                    lock(&waiters.granted).insert((key.clone(), grant.seq), grant);
                    waiters.wake(&key);
                }
            }
            waiters.subscribed.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(1))).await;
    }
}

/// Resolves when the master moved (never without Sentinel, or once its sender is gone).
async fn changed(moved: Option<&mut watch::Receiver<u64>>) {
    if let Some(moved) = moved
        && moved.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}
