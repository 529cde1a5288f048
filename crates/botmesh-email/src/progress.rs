//! How far the IMAP session got: the UIDVALIDITY of the mailbox and the highest UID handed to
//! the bot (or reported malformed), kept in the bot's shared store so that the replica that
//! takes the session over resumes right after the last mail the old one acknowledged.
//!
//! The UID only moves forward within one UIDVALIDITY, so a session that stalled and wakes up
//! late cannot move it back. A new UIDVALIDITY replaces the row.

use std::sync::Arc;

use botmesh_traits::{CasOutcome, CheckpointWrite, Result, Store};
use serde::{Deserialize, Serialize};

/// A mailbox position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Position {
    /// The mailbox's UIDVALIDITY.
    pub(crate) validity: u32,
    /// Every mail up to this UID was taken care of.
    pub(crate) uid: u32,
}

/// The position, as a row of the bot's store (without a store: in this process only).
pub(crate) struct Progress {
    store: Option<Arc<dyn Store>>,
    key: String,
}

/// How often a write that lost a race is tried again.
const RACES: usize = 3;

impl Progress {
    pub(crate) fn new(store: Option<Arc<dyn Store>>, provider: &str, mailbox: &str) -> Self {
        Self { store, key: format!("botmesh:provider:{provider}:imap:{mailbox}") }
    }

    /// The recorded position, if any.
    pub(crate) async fn load(&self) -> Result<Option<Position>> {
        let Some(store) = &self.store else { return Ok(None) };
        let row = store.get_checkpoint(&self.key).await?;
        Ok(row.and_then(|r| serde_json::from_str(&r.data).ok()))
    }

    /// Records `at`, unless a position at or past it (same UIDVALIDITY) is recorded already.
    pub(crate) async fn save(&self, at: Position) -> Result<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let data = serde_json::to_string(&at).unwrap_or_default();
        let write = CheckpointWrite::new(data);
        for _ in 0..RACES {
            let row = store.get_checkpoint(&self.key).await?;
            let kept: Option<Position> =
                row.as_ref().and_then(|r| serde_json::from_str(&r.data).ok());
            if kept.is_some_and(|k| k.validity == at.validity && k.uid >= at.uid) {
                return Ok(());
            }
            let Some(cas) = store.cas() else {
                // A store without compare-and-set: the plain write, last writer wins.
                return store.set_checkpoint(&self.key, &write).await.map(|_| ());
            };
            if let CasOutcome::Written { .. } =
                cas.set_checkpoint_if(&self.key, &write, row.map(|r| r.revision)).await?
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use botmesh_core::MemoryStore;

    use super::*;

    fn progress(store: &Arc<MemoryStore>) -> Progress {
        Progress::new(Some(Arc::clone(store) as Arc<dyn Store>), "mail", "INBOX")
    }

    #[tokio::test]
    async fn the_uid_only_moves_forward_within_a_uidvalidity() {
        let store = Arc::new(MemoryStore::new());
        assert_eq!(progress(&store).load().await.unwrap(), None);
        progress(&store).save(Position { validity: 7, uid: 10 }).await.unwrap();
        progress(&store).save(Position { validity: 7, uid: 4 }).await.unwrap();
        assert_eq!(progress(&store).load().await.unwrap(), Some(Position { validity: 7, uid: 10 }));
        progress(&store).save(Position { validity: 9, uid: 2 }).await.unwrap();
        assert_eq!(
            progress(&store).load().await.unwrap(),
            Some(Position { validity: 9, uid: 2 }),
            "a new UIDVALIDITY replaces the row"
        );
    }
}
