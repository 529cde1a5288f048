//! Giving back what a failover handed back: turns and tickets the promoted replica records
//! as this incarnation's, which this incarnation already gave up.
//!
//! Replication is asynchronous. A release or a withdrawal that reached the old master but not
//! its replica is undone by the failover: the promoted replica records the turn as still held
//! by us, or the ticket as still queued. Were this incarnation dead, its expiry would clear
//! both; alive, it would hold the chat up for as long as it runs, since nothing here would
//! ever release a turn it no longer knows it has. Waiting for replicas
//! ([`RedisOptions::wait_for_replicas`](crate::RedisOptions)) does not close this: a release
//! that times out waiting is reported failed, and given up here, after it landed on the
//! master alone.
//!
//! So each time the master moves (through Sentinel: see `conn/sentinel.rs`), the coordinator
//! looks, once the move has settled, at every chat's turn state on the new master: one `SCAN`
//! of the keyspace matching the turn states, and one pipeline per page reading each chat's
//! holder and queue. A
//! turn or ticket of this incarnation that nothing here holds, runs or waits for is looked
//! at again a moment later, so that a take or a wait whose reply was on its way is not taken
//! for forgotten, and is then withdrawn the way a cancelled ticket is (`cancel.lua`, which
//! checks that it is still ours): the next ticket gets the turn, and a message of ours
//! journaled under it is taken over as a withdrawn one's would be.
//!
//! The cost is one pass over the keyspace per move of the master, off the message path; the
//! turn states it reads are those of the chats active or kept idle.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{ChatKey, Ticket};
use redis::Value;
use tokio::sync::watch;

use super::runs::Runs;
use super::withdraw::{Withdraw, Withdrawals};
use crate::conn::{Conn, backoff};
use crate::keys::Keys;

/// How many turn states one `SCAN` step asks for.
const PAGE: usize = 500;

/// Looks for what a failover handed back to this incarnation, and withdraws it.
pub(super) struct Reclaim {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) incarnation: String,
    pub(super) runs: Arc<Runs>,
    pub(super) withdrawals: Withdrawals,
    /// How long after a move the first look waits, and how long a candidate waits before it
    /// is looked at again: longer than a call's reply can take.
    pub(super) settle: Duration,
}

impl Reclaim {
    /// Reclaims after each move of the master, for as long as the coordinator lives.
    pub(super) async fn run(self, mut moved: watch::Receiver<u64>) {
        while moved.changed().await.is_ok() {
            tokio::time::sleep(self.settle).await;
            // Moves during the settle are covered by this pass.
            moved.borrow_and_update();
            let mut waits = backoff();
            while let Err(e) = self.pass().await {
                tracing::debug!(error = %e, "looking for turns a failover handed back");
                tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(1))).await;
            }
        }
    }

    /// One look over every chat's turn state; withdraws what is ours and forgotten.
    pub(super) async fn pass(&self) -> redis::RedisResult<()> {
        let forgotten = self.forgotten(&self.scan().await?).await?;
        if forgotten.is_empty() {
            return Ok(());
        }
        // A take or wait whose reply was on its way is known by now.
        tokio::time::sleep(self.settle).await;
        for (key, seq) in forgotten {
            if self.known(&key, seq) {
                continue;
            }
            tracing::info!(
                chat = %key, ticket = seq,
                "a failover handed back a turn or ticket this replica had given up: withdrawing it"
            );
            // Retried in the background until Redis confirms it.
            let _ =
                self.withdrawals.now_or_later(Withdraw::Ticket(Ticket::new(key, seq, None))).await;
        }
        Ok(())
    }

    /// Every chat that has a turn state now.
    async fn scan(&self) -> redis::RedisResult<Vec<ChatKey>> {
        let (states, _) = self.keys.turn("");
        let pattern = format!("{}*", glob_escape(&states));
        let mut conn = self.conn.clone();
        let (mut cursor, mut chats) = (0u64, Vec::new());
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await?;
            chats.extend(page.iter().filter_map(|s| s.strip_prefix(&states)).map(ChatKey::from));
            if next == 0 {
                return Ok(chats);
            }
            cursor = next;
        }
    }

    /// The tickets of `chats` that Redis records as ours (holding the turn, or queued) and
    /// that nothing here knows of.
    async fn forgotten(&self, chats: &[ChatKey]) -> redis::RedisResult<BTreeSet<(ChatKey, u64)>> {
        let mut found = BTreeSet::new();
        let mut conn = self.conn.clone();
        for page in chats.chunks(PAGE) {
            let mut pipe = redis::pipe();
            for key in page {
                let (state, queue) = self.keys.turn(key.as_str());
                pipe.cmd("HGET").arg(state).arg("h").cmd("ZRANGE").arg(queue).arg(0).arg(-1);
            }
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            for (key, pair) in page.iter().zip(replies.chunks(2)) {
                let [holder, queued] = pair else { continue };
                let holder: Option<String> = redis::from_redis_value(holder.clone())?;
                let queued: Vec<String> = redis::from_redis_value(queued.clone())?;
                // The holder is "incarnation|seq|fence|tid", a member "seq|incarnation|…".
                let held = holder.as_deref().and_then(|h| {
                    let mut parts = h.split('|');
                    (parts.next() == Some(self.incarnation.as_str())).then(|| parts.next())?
                });
                let tickets = queued.iter().filter_map(|m| {
                    let mut parts = m.split('|');
                    let seq = parts.next();
                    (parts.next() == Some(self.incarnation.as_str())).then_some(seq)?
                });
                for seq in held.into_iter().chain(tickets).filter_map(|s| s.parse().ok()) {
                    if !self.known(key, seq) {
                        found.insert((key.clone(), seq));
                    }
                }
            }
        }
        Ok(found)
    }

    /// Whether ticket `seq` of `key` is held, run or waited for here. A ticket stays among
    /// the waiting until its waiter has its turn (or gives up), so a grant on its way to the
    /// waiter counts as known; a grant delivered for a ticket nobody waits for any more does
    /// not.
    fn known(&self, key: &ChatKey, seq: u64) -> bool {
        self.runs.knows(key, seq)
    }
}

/// `s` with the characters `SCAN`'s `MATCH` reads as a pattern escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn a_prefix_with_pattern_characters_matches_only_itself() {
        assert_eq!(glob_escape("shop:coord:t:"), "shop:coord:t:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
