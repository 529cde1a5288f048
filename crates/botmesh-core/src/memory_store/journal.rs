//! The memory store's inbox journal and outbox, indexed so that no call scans them whole: the
//! pending records by sequence, and what expires (acknowledged records, outbox entries) by
//! when. Expired entries are dropped from the front of their index as calls come, so each
//! call costs what expired since the last one, not what the store holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use botmesh_traits::{InboxAppend, InboxRecord, InboxState, JournalStore, Result, async_trait};
use tokio::time::Instant;

use super::{MemoryStore, live};

/// The journal and the outbox.
#[derive(Debug, Default)]
pub(super) struct Journal {
    records: HashMap<String, Journaled>,
    /// The pending records' ids, in journal order.
    pending: BTreeMap<u64, String>,
    /// Acknowledged records' ids by when they are forgotten. An entry whose record was
    /// acknowledged again since is stale, and skipped.
    forget: BTreeSet<(Instant, String)>,
    /// The last sequence given to a record.
    seq: u64,
    /// Outbox entries and until when each is kept.
    outbox: HashMap<String, Instant>,
    /// Outbox entries by when they expire; an entry claimed again or released since is
    /// stale, and skipped.
    outbox_expiry: BTreeSet<(Instant, String)>,
}

#[derive(Debug)]
struct Journaled {
    record: InboxRecord,
    seq: u64,
    /// Set once acknowledged: the record is forgotten after this.
    forget_at: Option<Instant>,
    retain: Duration,
}

impl Journal {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Forgets the acknowledged records due by `now`.
    fn sweep_records(&mut self, now: Instant) {
        while let Some(id) = next_due(&mut self.forget, now) {
            if self.records.get(&id).is_some_and(|j| !live(j.forget_at, now)) {
                self.records.remove(&id);
            }
        }
    }

    /// Drops the outbox entries expired by `now`.
    fn sweep_outbox(&mut self, now: Instant) {
        while let Some(key) = next_due(&mut self.outbox_expiry, now) {
            if self.outbox.get(&key).is_some_and(|t| !live(Some(*t), now)) {
                self.outbox.remove(&key);
            }
        }
    }

    /// The record `id`, unless it was forgotten by `now`.
    fn live(&self, id: &str, now: Instant) -> Option<&Journaled> {
        self.records.get(id).filter(|j| live(j.forget_at, now))
    }

    /// Acknowledges record `id` at `now`.
    fn ack(&mut self, id: &str, now: Instant) {
        let Some(j) = self.records.get_mut(id) else { return };
        if j.record.state == InboxState::Pending {
            self.pending.remove(&j.seq);
        }
        j.record.state = InboxState::Acked;
        let at = now + j.retain;
        j.forget_at = Some(at);
        self.forget.insert((at, id.to_owned()));
    }
}

/// Takes the first entry of `index` that is due by `now`, if any.
fn next_due(index: &mut BTreeSet<(Instant, String)>, now: Instant) -> Option<String> {
    if index.first().is_some_and(|(at, _)| *at <= now) {
        return index.pop_first().map(|(_, entry)| entry);
    }
    None
}

#[async_trait]
impl JournalStore for MemoryStore {
    async fn inbox_append(&self, record: &InboxRecord, retain: Duration) -> Result<InboxAppend> {
        let now = Instant::now();
        let mut g = self.lock()?;
        let journal = &mut g.journal;
        journal.sweep_records(now);
        if let Some(j) = journal.records.get(&record.id) {
            return Ok(InboxAppend::Duplicate { state: j.record.state });
        }
        let seq = journal.next_seq();
        let forget_at = (record.state == InboxState::Acked).then(|| now + retain);
        match forget_at {
            Some(at) => {
                journal.forget.insert((at, record.id.clone()));
            }
            None => {
                journal.pending.insert(seq, record.id.clone());
            }
        }
        let journaled = Journaled { record: record.clone(), seq, forget_at, retain };
        journal.records.insert(record.id.clone(), journaled);
        Ok(InboxAppend::Appended)
    }

    async fn inbox_ack(&self, id: &str) -> Result<()> {
        let now = Instant::now();
        self.lock()?.journal.ack(id, now);
        Ok(())
    }

    async fn inbox_get(&self, id: &str) -> Result<Option<InboxRecord>> {
        let now = Instant::now();
        Ok(self.lock()?.journal.live(id, now).map(|j| j.record.clone()))
    }

    async fn inbox_pending(&self, limit: usize) -> Result<Vec<InboxRecord>> {
        let g = self.lock()?;
        let journal = &g.journal;
        Ok(journal
            .pending
            .values()
            .filter_map(|id| journal.records.get(id))
            .take(limit)
            .map(|j| j.record.clone())
            .collect())
    }

    async fn inbox_claim(&self, id: &str, from: &str, to: &str) -> Result<bool> {
        let mut g = self.lock()?;
        match g.journal.records.get_mut(id) {
            Some(j) if j.record.state == InboxState::Pending && j.record.owner == from => {
                to.clone_into(&mut j.record.owner);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn outbox_mark(&self, key: &str, ttl: Duration) -> Result<()> {
        let now = Instant::now();
        let mut g = self.lock()?;
        let journal = &mut g.journal;
        journal.sweep_outbox(now);
        let until = now + ttl;
        // A mark made again leaves its earlier expiry entry behind; the sweep skips it.
        journal.outbox.insert(key.to_owned(), until);
        journal.outbox_expiry.insert((until, key.to_owned()));
        Ok(())
    }

    async fn outbox_marked(&self, key: &str) -> Result<bool> {
        let now = Instant::now();
        Ok(self.lock()?.journal.outbox.get(key).is_some_and(|&until| until > now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn what_expired_is_dropped_as_calls_come_and_what_is_pending_stays() {
        let store = MemoryStore::new();
        let retain = Duration::from_secs(10);
        for id in ["a", "b", "c"] {
            let record = InboxRecord::pending(id, "t:1", "{}", "me");
            assert!(matches!(store.inbox_append(&record, retain).await, Ok(InboxAppend::Appended)));
        }
        store.inbox_ack("a").await.unwrap();
        store.inbox_ack("b").await.unwrap();
        tokio::time::advance(Duration::from_secs(5)).await;
        // Acknowledged again: kept ten seconds from now.
        store.inbox_ack("b").await.unwrap();
        tokio::time::advance(Duration::from_secs(6)).await;
        let record = InboxRecord::pending("d", "t:1", "{}", "me");
        store.inbox_append(&record, retain).await.unwrap();
        {
            let g = store.lock().unwrap();
            let mut kept: Vec<&str> = g.journal.records.keys().map(String::as_str).collect();
            kept.sort_unstable();
            assert_eq!(kept, ["b", "c", "d"], "a was forgotten, b acknowledged again is not yet");
        }
        let pending: Vec<String> =
            store.inbox_pending(10).await.unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(pending, ["c", "d"], "pending in journal order");

        let ttl = Duration::from_secs(10);
        store.outbox_mark("x", ttl).await.unwrap();
        store.outbox_mark("y", ttl).await.unwrap();
        tokio::time::advance(Duration::from_secs(5)).await;
        // Marked again: kept ten seconds from now.
        store.outbox_mark("y", ttl).await.unwrap();
        tokio::time::advance(Duration::from_secs(6)).await;
        store.outbox_mark("z", ttl).await.unwrap();
        assert!(!store.outbox_marked("x").await.unwrap(), "x expired");
        assert!(store.outbox_marked("y").await.unwrap(), "y, marked again, did not");
        let g = store.lock().unwrap();
        let mut kept: Vec<&str> = g.journal.outbox.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["y", "z"], "what expired is dropped as calls come");
    }
}
