//! The coordination backend as the runtime uses it: every call timed into
//! [`COORDINATOR_CALLS`] by operation and outcome, then passed on unchanged.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use botmesh_core::telemetry::{COORDINATOR_CALLS, CallTimings};
use botmesh_core::traits::{
    ChatKey, ClusterView, Coordinator, Error, InboxRecord, JournaledTicket, Leadership,
    ReleaseOptions, Result, Ticket, TurnGrant, TurnJournal, async_trait,
};

use crate::backend::Backend;

/// The backend operations, numbered as [`Metered`] times them.
const OPS: [&str; 12] = [
    "take_tickets",
    "wait_turn",
    "release_turn_with",
    "cancel_ticket",
    "is_alive",
    "heartbeat",
    "try_lead",
    "resign",
    "publish_status",
    "cluster",
    "take_tickets_journaling",
    "release_turn_acknowledging",
];

/// A backend whose calls are timed: the runtime's only way to its backend.
pub(crate) struct Metered {
    inner: Backend,
    timings: CallTimings,
}

impl Metered {
    /// Wraps `inner`, taking the histograms from the recorder installed now.
    pub(crate) fn new(inner: Arc<dyn Coordinator>) -> Self {
        Self { inner: Backend::new(inner), timings: CallTimings::new(COORDINATOR_CALLS, &OPS) }
    }

    async fn timed<T>(&self, op: usize, call: impl Future<Output = Result<T>>) -> Result<T> {
        self.timings.time(op, call).await
    }

    // The calls the runtime makes, each the backend's own future timed in place: inherent
    // methods rather than a `Coordinator` impl, whose every call would box its future again.

    pub(crate) fn incarnation(&self) -> &str {
        self.inner.incarnation()
    }

    pub(crate) fn subscribed(&self) -> bool {
        self.inner.subscribed()
    }

    /// The backend's journal, timed, when it has one.
    pub(crate) fn turn_journal(&self) -> Option<&dyn TurnJournal> {
        self.inner.turn_journal().map(|_| self as &dyn TurnJournal)
    }

    pub(crate) async fn take_tickets(&self, key: &ChatKey, count: usize) -> Result<Vec<Ticket>> {
        self.timed(0, self.inner.take_tickets(key, count)).await
    }

    pub(crate) async fn wait_turn(&self, ticket: &Ticket, timeout: Duration) -> Result<TurnGrant> {
        self.timed(1, self.inner.wait_turn(ticket, timeout)).await
    }

    pub(crate) async fn release_turn_with(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
    ) -> Result<bool> {
        self.timed(2, self.inner.release_turn_with(grant, options)).await
    }

    pub(crate) async fn cancel_ticket(&self, ticket: &Ticket) -> Result<()> {
        self.timed(3, self.inner.cancel_ticket(ticket)).await
    }

    pub(crate) async fn is_alive(&self, incarnation: &str) -> Result<bool> {
        self.timed(4, self.inner.is_alive(incarnation)).await
    }

    pub(crate) async fn heartbeat(&self, lease: Duration) -> Result<()> {
        self.timed(5, self.inner.heartbeat(lease)).await
    }

    pub(crate) async fn try_lead(&self, name: &str, lease: Duration) -> Result<Option<Leadership>> {
        self.timed(6, self.inner.try_lead(name, lease)).await
    }

    pub(crate) async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        self.timed(7, self.inner.resign(leadership)).await
    }

    pub(crate) async fn publish_status(&self, status: &str, keep: Duration) -> Result<()> {
        self.timed(8, self.inner.publish_status(status, keep)).await
    }

    pub(crate) async fn cluster(&self, leaderships: &[String]) -> Result<ClusterView> {
        self.timed(9, self.inner.cluster(leaderships)).await
    }
}

/// The backend's journal, timed like its other calls.
#[async_trait]
impl TurnJournal for Metered {
    fn place(&self) -> &str {
        self.inner.turn_journal().map_or("", TurnJournal::place)
    }

    async fn take_tickets_journaling(
        &self,
        key: &ChatKey,
        records: &[InboxRecord],
        retain: Duration,
    ) -> Result<Vec<JournaledTicket>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: OPS[10] })?;
        self.timed(10, journal.take_tickets_journaling(key, records, retain)).await
    }

    async fn release_turn_acknowledging(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        id: &str,
    ) -> Result<Option<bool>> {
        let journal = self.inner.turn_journal().ok_or(Error::Unsupported { op: OPS[11] })?;
        self.timed(11, journal.release_turn_acknowledging(grant, options, id)).await
    }
}
