//! A coordinator wrapper that fails on command, for fault tests on any backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use botmesh_traits::{
    ChatKey, ClusterView, Coordinator, Error, InboxRecord, JournaledTicket, Leadership,
    ReleaseOptions, Result, Ticket, TurnGrant, TurnJournal, async_trait,
};

/// Wraps any [`Coordinator`] so a test can make its replica crash or stall, on any backend.
///
/// - [`crash`](Self::crash): the replica dies as a process would. Every later call fails with
///   `CoordinationUnavailable`; nothing is released, no heartbeat is sent, so the backend takes
///   its turns and leaderships back after the lease and skips its queued tickets.
/// - [`set_stalled`](Self::set_stalled): heartbeats fail while the rest still works, as when a
///   replica's renewals cannot get through.
/// - [`fail_heartbeats`](Self::fail_heartbeats): the next few heartbeats fail, as on a dropped
///   connection that reconnects at once.
/// - [`fail_releases`](Self::fail_releases): the next few releases fail on the wire without
///   reaching the backend.
/// - [`delay_leadership`](Self::delay_leadership): campaign and resignation replies arrive
///   late, as from a slow backend.
/// - [`delay_tickets`](Self::delay_tickets): tickets arrive late, as to a process that froze
///   while it took them.
///
/// A backend that writes the store's journal with its tickets and releases
/// ([`TurnJournal`]) keeps doing so through the wrapper, under the same faults: a journaling
/// take is a ticket, an acknowledging release a release.
#[derive(Debug)]
pub struct FaultyCoordinator<C: ?Sized = dyn Coordinator> {
    crashed: AtomicBool,
    stalled: AtomicBool,
    failing_heartbeats: AtomicU32,
    failing_releases: AtomicU32,
    leadership_delay: std::sync::Mutex<Duration>,
    ticket_delay: std::sync::Mutex<Duration>,
    inner: Arc<C>,
}

impl<C: Coordinator + ?Sized> FaultyCoordinator<C> {
    /// Wraps `inner`, healthy.
    pub fn new(inner: Arc<C>) -> Self {
        Self {
            crashed: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            failing_heartbeats: AtomicU32::new(0),
            failing_releases: AtomicU32::new(0),
            leadership_delay: std::sync::Mutex::new(Duration::ZERO),
            ticket_delay: std::sync::Mutex::new(Duration::ZERO),
            inner,
        }
    }

    /// Kills the replica for good.
    pub fn crash(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }

    /// Blocks (or unblocks) heartbeats.
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
    }

    /// Makes the next `count` heartbeats fail, then lets them through again.
    pub fn fail_heartbeats(&self, count: u32) {
        self.failing_heartbeats.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` releases fail on the wire: the backend never sees them.
    pub fn fail_releases(&self, count: u32) {
        self.failing_releases.store(count, Ordering::SeqCst);
    }

    /// Makes every later campaign ([`try_lead`](Coordinator::try_lead)) and resignation answer
    /// `delay` after the backend did.
    pub fn delay_leadership(&self, delay: Duration) {
        *self.leadership_delay.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = delay;
    }

    /// Makes every later ticket answer `delay` after the backend gave it, as on a process
    /// that froze while it took it.
    pub fn delay_tickets(&self, delay: Duration) {
        *self.ticket_delay.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = delay;
    }

    fn take(counter: &AtomicU32) -> bool {
        counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    async fn leadership_answers_late(&self) {
        let delay =
            *self.leadership_delay.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }

    fn release_fault(&self) -> Result<()> {
        self.alive()?;
        if Self::take(&self.failing_releases) {
            return Err(Error::CoordinationUnavailable {
                reason: "the release was lost on the wire".to_owned(),
                source: None,
            });
        }
        Ok(())
    }

    fn alive(&self) -> Result<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Error::CoordinationUnavailable {
                reason: "the replica crashed".to_owned(),
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl<C: Coordinator + ?Sized> Coordinator for FaultyCoordinator<C> {
    fn replica_id(&self) -> &str {
        self.inner.replica_id()
    }

    fn incarnation(&self) -> &str {
        self.inner.incarnation()
    }

    fn lease(&self) -> Duration {
        self.inner.lease()
    }

    fn subscribed(&self) -> bool {
        self.inner.subscribed()
    }

    fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        self.inner.turn_journal().map(|_| self as &dyn TurnJournal)
    }

    async fn take_ticket(&self, key: &ChatKey) -> Result<Ticket> {
        self.alive()?;
        let ticket = self.inner.take_ticket(key).await?;
        let delay = *self.ticket_delay.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.alive()?;
        Ok(ticket)
    }

    async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        self.alive()?;
        let grant = self.inner.wait_turn(ticket, timeout).await?;
        // A dead process does not act on an answer that arrives after its death.
        self.alive()?;
        Ok(grant)
    }

    async fn release_turn(&self, grant: &TurnGrant) -> Result<bool> {
        self.release_fault()?;
        self.inner.release_turn(grant).await
    }

    async fn release_turn_with(&self, grant: &TurnGrant, options: &ReleaseOptions) -> Result<bool> {
        self.release_fault()?;
        self.inner.release_turn_with(grant, options).await
    }

    async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()> {
        self.alive()?;
        self.inner.cancel_ticket(ticket).await
    }

    async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        self.alive()?;
        self.inner.is_alive(incarnation).await
    }

    async fn heartbeat(&self, lease: Duration) -> Result<()> {
        self.alive()?;
        if self.stalled.load(Ordering::SeqCst) {
            return Err(Error::CoordinationUnavailable {
                reason: "heartbeats are blocked".to_owned(),
                source: None,
            });
        }
        if Self::take(&self.failing_heartbeats) {
            return Err(Error::CoordinationUnavailable {
                reason: "the connection dropped".to_owned(),
                source: None,
            });
        }
        self.inner.heartbeat(lease).await
    }

    async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>> {
        self.alive()?;
        let lead = self.inner.try_lead(name, lease).await?;
        self.leadership_answers_late().await;
        self.alive()?;
        Ok(lead)
    }

    async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        self.alive()?;
        let resigned = self.inner.resign(leadership).await;
        self.leadership_answers_late().await;
        resigned
    }

    async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        self.alive()?;
        self.inner.publish_status(status, keep).await
    }

    async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        self.alive()?;
        self.inner.cluster(leaderships).await
    }
}

#[async_trait]
impl<C: Coordinator + ?Sized> TurnJournal for FaultyCoordinator<C> {
    fn place(&self) -> &str {
        self.inner.turn_journal().map_or("", TurnJournal::place)
    }

    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>> {
        self.alive()?;
        let journal = self
            .inner
            .turn_journal()
            .ok_or(Error::Unsupported { op: "take_tickets_journaling" })?;
        let answers = journal.take_tickets_journaling(key, records, retain).await?;
        let delay = *self.ticket_delay.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.alive()?;
        Ok(answers)
    }

    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> Result<Option<bool>> {
        self.release_fault()?;
        let journal = self
            .inner
            .turn_journal()
            .ok_or(Error::Unsupported { op: "release_turn_acknowledging" })?;
        journal.release_turn_acknowledging(grant, options, id).await
    }
}
