//! Waiting for a turn: woken by the release that hands the turn over (through the wake
//! channel, or a release's reply), by the watch of the incarnation waited behind when it is
//! found gone, and otherwise looking at Redis once per lease while the channel is up, or
//! polling while it is down.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{BoxError, Coordinator, Error, Result, Ticket, TurnGrant};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{RedisCoordinator, lock, unavailable};
use crate::call::ScriptCall;
use crate::keys::Keys;
use crate::{replicas, scripts};

/// What a look at a waiting ticket found.
enum Look {
    /// The turn is the ticket's.
    Granted(TurnGrant),
    /// Another holds it: the holder's incarnation ('' when none).
    Wait { holder: String },
}

impl RedisCoordinator {
    /// Looks whether `ticket` has the turn (taking it when it is free), and otherwise which
    /// incarnation holds it. Waiting for replicas, a turn found granted counts once they have
    /// it, whoever granted it (see `replicas.rs`); one that did not reach them is found again
    /// by the next look.
    async fn try_turn(&self, ticket: &Ticket) -> Result<Look> {
        let (state, queue) = self.keys.turn(ticket.key.as_str());
        let alive = Keys::alive_prefix(&self.keys.shard(ticket.key.as_str()));
        let (wake, key) = (self.keys.wake_prefix(), ticket.key.as_str());
        let bytes = state.len() + queue.len() + alive.len() + wake.len() + key.len();
        let mut call = ScriptCall::new(scripts::TRY_TURN.get(), 2, 7, bytes + 64);
        call.arg(&state).arg(&queue).arg(&self.incarnation).arg(&alive).arg(ticket.seq);
        call.arg(&wake).arg(key);
        let reply: Vec<String> = replicas::script(&call, &mut self.conn(), self.connect.replicas)
            .await
            .map_err(|e| unavailable("waiting for a turn", e))?;
        match reply.as_slice() {
            [status, fence, prev, passed] if status == "granted" => {
                Self::grant(&ticket.key, &ticket.seq.to_string(), fence, prev, passed)
                    .map(Look::Granted)
            }
            [status, rest @ ..] if status == "wait" => {
                self.waiters.deliver(&ticket.key, rest);
                Ok(Look::Wait { holder: rest.get(4).cloned().unwrap_or_default() })
            }
            [status] if status == "gone" => Err(Error::CoordinationUnavailable {
                reason: format!(
                    "ticket {} of {} is no longer queued (this replica was taken for dead)",
                    ticket.seq, ticket.key
                ),
                source: None,
            }),
            _ => Err(Error::corrupt("try_turn reply", format!("{reply:?}"))),
        }
    }

    /// How long a waiter waits before it looks at Redis again without having been woken:
    /// fast while the wake channel is down, else once per lease.
    fn next_look(&self, subscribed: bool, poll: Duration) -> Duration {
        if subscribed { self.lease } else { poll }
    }

    /// Waits for `ticket`'s turn, at most `timeout` (see [`Coordinator::wait_turn`]).
    pub(super) async fn wait(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        if let Some(grant) = &ticket.grant {
            return Ok(grant.clone());
        }
        let id = (ticket.key.clone(), ticket.seq);
        // A wait too long to represent is a wait without end.
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
        let waiter = self.waiters.register(&ticket.key);
        // Releases wake waiters through the channel; a holder that dies without releasing is
        // noticed by the watch of the incarnation waited behind. Looking at Redis otherwise
        // is only the safety net, or the way to wait while the channel is down.
        let holder = lock(&self.waiters.holders).remove(&id);
        let subscribed = || self.waiters.subscribed.load(std::sync::atomic::Ordering::SeqCst);
        // A ticket that did not come with its turn will be handed the turn by the release
        // before it, which tells this incarnation directly: with the channel up, the first
        // look at Redis waits for that message instead of asking now, unless nobody is known
        // to hold the turn.
        let mut ask = !subscribed() || holder.is_none();
        let mut behind = holder.filter(|h| *h != self.incarnation).map(|h| self.watch.watch(&h));
        let mut poll = Duration::from_millis(5);
        let mut last_error = None;
        // Whether the last look failed: the next one comes after a poll's pause, not a lease.
        let mut failed = false;
        loop {
            // Armed before looking, so a hand-over (or a holder found gone) between the look
            // and the wait is seen.
            let woken = waiter.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let gone = behind.as_ref().map(|b| Arc::clone(&b.gone));
            let mut holder_gone = std::pin::pin!(gone.as_deref().map(Notify::notified));
            if let Some(notified) = holder_gone.as_mut().as_pin_mut() {
                notified.enable();
            }
            // A release that handed us the turn said so on our channel, grant included.
            if let Some(grant) = lock(&self.waiters.granted).remove(&id) {
                return Ok(grant);
            }
            // Heard granted, to confirm by a look (waiting for replicas, see `Waiters`).
            if lock(&self.waiters.heard).remove(&id) {
                ask = true;
            }
            if ask {
                failed = false;
                match self.try_turn(ticket).await {
                    Ok(Look::Granted(grant)) => return Ok(grant),
                    Ok(Look::Wait { holder }) => {
                        behind = (!holder.is_empty() && holder != self.incarnation)
                            .then(|| self.watch.watch(&holder));
                    }
                    Err(e @ Error::CoordinationUnavailable { source: None, .. }) => return Err(e),
                    Err(e) => {
                        failed = true;
                        last_error = Some(e);
                    }
                }
            }
            ask = true;
            let now = Instant::now();
            if now >= deadline {
                // Withdraw the ticket so it does not hold the chat up; best effort when
                // Redis is down (its incarnation's expiry then skips it).
                let _ = self.cancel_ticket(ticket).await;
                return Err(Error::CoordinationUnavailable {
                    reason: format!("no turn for {} within {timeout:?}", ticket.key),
                    source: last_error.map(|e| Box::new(e) as BoxError),
                });
            }
            let look = if failed { poll } else { self.next_look(subscribed(), poll) };
            let holder_gone = async {
                match holder_gone.as_mut().as_pin_mut() {
                    Some(notified) => notified.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut woken => {}
                () = holder_gone => {}
                () = tokio::time::sleep(look.min(deadline - now)) => {
                    poll = (poll * 2).min(self.max_poll);
                }
            }
        }
    }
}
