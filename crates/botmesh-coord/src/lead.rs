//! Leadership held as a value: released on `release()` or when dropped.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::traits::{Coordinator, Error, Leadership, async_trait};

/// Leadership of a named role (a singleton job, say), held by this replica.
///
/// Lives as long as this replica's heartbeats (the coordination runtime renews it with every
/// other lease). Give it back with [`release`](Self::release); dropping it gives it back too,
/// in the background.
///
/// ```no_run
/// # async fn demo(coordinator: std::sync::Arc<dyn botmesh_coord::Coordinator>) -> Result<(), botmesh_core::traits::Error> {
/// use std::time::Duration;
/// use botmesh_coord::LeadExt;
///
/// if let Some(lead) = coordinator.lead("job:report", Duration::from_secs(15)).await? {
///     // ... only one replica runs this at a time; `lead.fence()` fences its writes ...
///     lead.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct Lead {
    coordinator: Arc<dyn Coordinator>,
    leadership: Option<Leadership>,
}

impl std::fmt::Debug for Lead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lead").field("leadership", &self.leadership).finish_non_exhaustive()
    }
}

impl Lead {
    /// The role.
    pub fn name(&self) -> &str {
        self.leadership.as_ref().map_or("", |l| l.name.as_str())
    }

    /// The leadership's fence: larger than any earlier leader's of the role.
    pub fn fence(&self) -> u64 {
        self.leadership.as_ref().map_or(0, |l| l.fence)
    }

    /// Gives the leadership back. Returns `false` when it was no longer held.
    pub async fn release(mut self) -> Result<bool, Error> {
        match self.leadership.take() {
            Some(l) => self.coordinator.resign(&l).await,
            None => Ok(false),
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        let Some(leadership) = self.leadership.take() else { return };
        let coordinator = Arc::clone(&self.coordinator);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = coordinator.resign(&leadership).await {
                    tracing::warn!(target: "botmesh", error = %e, "giving a dropped leadership back failed; its lease will expire");
                }
            });
        }
    }
}

/// `coordinator.lead(name, lease)`: leadership as a [`Lead`] value.
#[async_trait]
pub trait LeadExt {
    /// Becomes leader of `name` if no live replica is: `Some` on one replica, `None` on the
    /// others.
    async fn lead(&self, name: &str, lease: Duration) -> Result<Option<Lead>, Error>;
}

#[async_trait]
impl LeadExt for Arc<dyn Coordinator> {
    async fn lead(&self, name: &str, lease: Duration) -> Result<Option<Lead>, Error> {
        Ok(self
            .try_lead(name, lease)
            .await?
            .map(|l| Lead { coordinator: Arc::clone(self), leadership: Some(l) }))
    }
}
