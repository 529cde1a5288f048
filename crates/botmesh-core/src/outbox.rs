//! The outbox marks of a handler's sends, kept in memory while their message runs.
//!
//! With durability, a send made while handling a journaled message is marked in the store once
//! the provider took it, so that a later run of the same message skips it (see
//! `Shared::send_once`). A handler's message runs again only while it is pending: when its
//! replica hands it back, or dies or freezes before acknowledging it. So a handler's marks wait
//! here instead of costing a store write each:
//! - a run that ends cleanly is acknowledged, and its marks are dropped unwritten: nothing will
//!   run it again;
//! - a run that ends otherwise (cut short, failed on a backend, its turn lost) writes them
//!   before its message is handed back;
//! - a run still going [`Durability::mark_within`](crate::Durability::mark_within) after a
//!   send writes what it kept by then, so a replica that dies in a long handler leaves the
//!   marks of its earlier sends behind.
//!
//! A send whose replica dies before its mark was written goes out again on the replica that
//! takes the message over, as it would between a send and its mark written at once; waiting
//! widens that window by `mark_within` at most. Flow and conversation steps mark at once: a
//! step can run again from a checkpoint after its message was acknowledged.

use std::sync::Mutex;
use std::time::Duration;

use botmesh_traits::{ChatKey, JournalStore};
use futures_util::future::join_all;
use tokio::sync::Notify;

use crate::event::EventBus;
use crate::lock::lock;

/// Where a chat's kept marks are written: the journal, for how long, and where a mark that
/// cannot be written is reported.
pub(crate) struct Writer<'a> {
    pub(crate) inbox: &'a dyn JournalStore,
    pub(crate) ttl: Duration,
    pub(crate) events: &'a EventBus,
    pub(crate) key: &'a ChatKey,
}

/// The outbox marks kept for the message handled now (see the module's documentation).
#[derive(Default)]
pub(crate) struct Marks {
    /// Marks not written yet, oldest first.
    kept: Mutex<Vec<String>>,
    /// Woken when a mark is kept while none was.
    first: Notify,
}

impl Marks {
    /// Keeps `mark`, the outbox mark of a send the provider took.
    pub(crate) fn keep(&self, mark: String) {
        let mut kept = lock(&self.kept);
        if kept.is_empty() {
            // A permit when nobody waits: the next wait for it returns at once.
            self.first.notify_one();
        }
        kept.push(mark);
    }

    /// Writes the marks kept so far; a mark that cannot be written is reported (the send then
    /// goes out again if the message runs again). They stay kept until their writes ended, so
    /// a write cut off midway leaves them for [`Marks::settle`].
    async fn write(&self, to: &Writer<'_>) {
        let marks = lock(&self.kept).clone();
        if marks.is_empty() {
            return;
        }
        let written = join_all(marks.iter().map(|m| to.inbox.outbox_mark(m, to.ttl))).await;
        for e in written.into_iter().filter_map(Result::err) {
            to.events.error(Some(to.key), e.into());
        }
        let mut kept = lock(&self.kept);
        kept.drain(..marks.len());
        if !kept.is_empty() {
            // Kept while these were written: the next round writes them.
            self.first.notify_one();
        }
    }

    /// Writes what is kept `within` after the first mark kept, for as long as it is polled:
    /// run beside a handler, for marks of a run that outlives its sends.
    pub(crate) async fn write_late(&self, to: &Writer<'_>, within: Duration) {
        loop {
            self.first.notified().await;
            tokio::time::sleep(within).await;
            self.write(to).await;
        }
    }

    /// Ends a run of a message: drops the marks of a run that ended `clean` (its message is
    /// acknowledged and never runs again), and writes the others first.
    pub(crate) async fn settle(&self, to: &Writer<'_>, clean: bool) {
        if !clean {
            self.write(to).await;
        }
        lock(&self.kept).clear();
    }
}
