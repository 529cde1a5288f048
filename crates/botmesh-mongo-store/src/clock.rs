//! The server's clock, as seen from this process.
//!
//! Times to live must be judged on one clock that every replica shares. MongoDB can compute
//! with its own clock only inside aggregation expressions (`$$NOW`), which the test server
//! cannot evaluate, so the store reads the server's clock instead: the `localTime` field of a
//! `hello` reply, sampled on connect and once a minute, gives the offset between this
//! process's clock and the server's. Every expiry the store writes or compares is this
//! process's time plus that offset, so replicas whose own clocks disagree still agree on when
//! a lock or lease runs out, to within half a round trip.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mongodb::Database;
use mongodb::bson::{Bson, DateTime, doc};

/// How often the offset is measured again.
pub(crate) const RESAMPLE_EVERY: Duration = Duration::from_secs(60);

/// The offset between this process's clock and the server's, in milliseconds.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    offset_ms: AtomicI64,
}

fn local_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

impl ServerClock {
    /// The server's time now, estimated.
    pub(crate) fn now(&self) -> DateTime {
        DateTime::from_millis(local_ms().saturating_add(self.offset_ms.load(Ordering::Relaxed)))
    }

    /// The server's time `after` from now.
    pub(crate) fn after(&self, after: Duration) -> DateTime {
        let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX / 2).max(1);
        DateTime::from_millis(self.now().timestamp_millis().saturating_add(ms))
    }

    /// Asks the server for its time and keeps the offset. A server that does not report its
    /// time leaves the offset as it was (zero at first: this process's clock).
    pub(crate) async fn sample(&self, db: &Database) -> mongodb::error::Result<()> {
        let sent = local_ms();
        let reply = db.run_command(doc! { "hello": 1 }).await?;
        let received = local_ms();
        if let Some(Bson::DateTime(server)) = reply.get("localTime") {
            let midpoint = sent + (received - sent) / 2;
            self.offset_ms.store(server.timestamp_millis() - midpoint, Ordering::Relaxed);
        }
        Ok(())
    }
}
