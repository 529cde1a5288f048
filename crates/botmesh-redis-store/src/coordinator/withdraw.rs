//! Withdrawing tickets nobody will wait for: one whose `take_tickets` reply was lost, or
//! whose cancel failed (or a run's turn, passed to a ticket withdrawn before it took it),
//! would hold its chat up until this incarnation's lease runs out. Each is tried again in the
//! background until Redis confirms it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_traits::{ChatKey, Ticket};
use tokio::sync::Notify;

use super::lock;
use super::wake::Waiters;
use crate::conn::backoff;
use crate::conn::{Conn, ms};
use crate::keys::Keys;
use crate::scripts;

/// A ticket to withdraw from Redis: one whose `take_tickets` reply was lost (found by the
/// call's tid), or one whose cancel failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Withdraw {
    /// The tickets a lost `take_tickets` call took in chat `key`, found by the call's `tid`.
    Orphans { key: ChatKey, tid: String },
    /// One ticket.
    Ticket(Ticket),
    /// The ticket `through` of chat `key`, to which the turn had passed within a run that
    /// Redis records as held by ticket `held` (see `runs.rs`): the run ends with it.
    Run { key: ChatKey, held: u64, through: u64 },
}

/// Withdraws tickets that would otherwise hold their chat up: what fails is tried again with
/// the coordinator's backoff until Redis confirms it, and leaves the list only then.
#[derive(Clone)]
pub(super) struct Withdrawals {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) incarnation: String,
    pub(super) idle_keep: Duration,
    pub(super) waiters: Arc<Waiters>,
    pub(super) pending: Arc<Mutex<Vec<Withdraw>>>,
    /// Woken when something is left for [`run`](Self::run).
    pub(super) queued: Arc<Notify>,
}

impl Withdrawals {
    async fn withdraw(&self, what: &Withdraw) -> redis::RedisResult<()> {
        let (key, script, id, through) = match what {
            Withdraw::Orphans { key, tid } => (key, scripts::ABANDON.get(), tid.clone(), None),
            Withdraw::Ticket(t) => {
                self.waiters.forget(&t.key, t.seq);
                lock(&self.waiters.holders).remove(&(t.key.clone(), t.seq));
                (&t.key, scripts::CANCEL.get(), t.seq.to_string(), None)
            }
            Withdraw::Run { key, held, through } => {
                (key, scripts::CANCEL.get(), held.to_string(), Some(through.to_string()))
            }
        };
        let (state, queue) = self.keys.turn(key.as_str());
        let reply: Vec<String> = script
            .key(state)
            .key(queue)
            .arg(&self.incarnation)
            .arg(id)
            .arg(ms(self.idle_keep))
            .arg(self.keys.wake_prefix())
            .arg(key.as_str())
            .arg(Keys::alive_prefix(&self.keys.shard(key.as_str())))
            .arg(through.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await?;
        // Not waited for by the replicas: a turn it handed to another of our tickets is
        // confirmed by that ticket's waiter, when grants wait for them.
        self.waiters.deliver_heard(key, reply.get(1..).unwrap_or_default());
        Ok(())
    }

    /// Withdraws `what` now, or keeps it for [`run`](Self::run).
    pub(super) async fn now_or_later(&self, what: Withdraw) -> redis::RedisResult<()> {
        let result = self.withdraw(&what).await;
        if result.is_err() {
            lock(&self.pending).push(what);
            self.queued.notify_one();
        }
        result
    }

    /// Tries what is left again, waiting longer after each pass that leaves something, until
    /// the coordinator is dropped. Idle while nothing is left.
    pub(super) async fn run(self) {
        loop {
            self.queued.notified().await;
            let mut waits = backoff();
            while !lock(&self.pending).is_empty() {
                tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(1))).await;
                let snapshot = lock(&self.pending).clone();
                for what in snapshot {
                    if self.withdraw(&what).await.is_ok() {
                        lock(&self.pending).retain(|w| *w != what);
                    }
                }
            }
        }
    }
}
