//! The poller's offset, kept in the bot's store so that the replica that takes polling over
//! resumes after the last update the old poller handed to the bot.
//!
//! Telegram numbers updates upwards, but starts again from a random number after a week
//! without any: an offset recorded more than a day ago is therefore not trusted (the poller
//! starts from what Telegram still holds, and the bot's dedupe drops what it already had) and
//! may be moved back.

use std::sync::Arc;

use botmesh_traits::{CasOutcome, CheckpointWrite, Result, Store};

/// The next update id to ask for, as a row of the bot's store (`{"next": n}`), only ever
/// moved forward: a poller that stalled and wakes up late cannot move it back.
pub(crate) struct Offset {
    store: Option<Arc<dyn Store>>,
    key: String,
}

/// How often a write that lost a race is tried again before it is left to the next batch.
const RACES: usize = 3;

/// How old a recorded offset may be and still be trusted.
const STALE_MS: u64 = 24 * 60 * 60 * 1000;

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Offset {
    pub(crate) fn new(store: Option<Arc<dyn Store>>, provider: &str) -> Self {
        Self { store, key: format!("botmesh:provider:{provider}:offset") }
    }

    /// The next update id to ask for: 0 (whatever Telegram still holds) when none was kept, or
    /// only a stale one.
    pub(crate) async fn load(&self) -> Result<i32> {
        let Some(store) = &self.store else { return Ok(0) };
        let row = store.get_checkpoint(&self.key).await?;
        Ok(row.and_then(|row| fresh(&row.data, now_ms())).unwrap_or(0))
    }

    /// Records that every update below `next` was handed to the bot.
    pub(crate) async fn save(&self, next: i32) -> Result<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let now = now_ms();
        let write =
            CheckpointWrite::new(serde_json::json!({ "next": next, "at": now }).to_string());
        for _ in 0..RACES {
            let row = store.get_checkpoint(&self.key).await?;
            if row.as_ref().and_then(|r| fresh(&r.data, now)).is_some_and(|kept| kept >= next) {
                return Ok(());
            }
            let expected = row.map(|r| r.revision);
            let Some(cas) = store.cas() else {
                // A store without compare-and-set: the plain write, last writer wins.
                return store.set_checkpoint(&self.key, &write).await.map(|_| ());
            };
            if let CasOutcome::Written { .. } =
                cas.set_checkpoint_if(&self.key, &write, expected).await?
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The offset a row records, unless it was recorded more than a day before `now`.
fn fresh(data: &str, now: u64) -> Option<i32> {
    let row: serde_json::Value = serde_json::from_str(data).ok()?;
    let at = row.get("at").and_then(serde_json::Value::as_u64)?;
    if now.saturating_sub(at) > STALE_MS {
        return None;
    }
    row.get("next").and_then(serde_json::Value::as_i64).and_then(|n| i32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use botmesh_core::MemoryStore;

    use super::*;

    fn offset(store: &Arc<MemoryStore>) -> Offset {
        Offset::new(Some(Arc::clone(store) as Arc<dyn Store>), "tg")
    }

    #[tokio::test]
    async fn the_offset_only_moves_forward_and_a_new_poller_reads_it_back() {
        let store = Arc::new(MemoryStore::new());
        assert_eq!(offset(&store).load().await.unwrap(), 0, "nothing kept yet");
        offset(&store).save(10).await.unwrap();
        offset(&store).save(7).await.unwrap();
        assert_eq!(
            offset(&store).load().await.unwrap(),
            10,
            "a late, older poller cannot move it back"
        );
        offset(&store).save(12).await.unwrap();
        assert_eq!(offset(&store).load().await.unwrap(), 12);
    }

    #[tokio::test]
    async fn an_offset_older_than_a_day_is_not_trusted_and_may_move_back() {
        let store = Arc::new(MemoryStore::new());
        let old = now_ms() - STALE_MS - 1;
        let row = serde_json::json!({"next": 900, "at": old}).to_string();
        store
            .set_checkpoint("botmesh:provider:tg:offset", &CheckpointWrite::new(row))
            .await
            .unwrap();
        assert_eq!(offset(&store).load().await.unwrap(), 0, "update ids may have started again");
        offset(&store).save(5).await.unwrap();
        assert_eq!(offset(&store).load().await.unwrap(), 5);
    }
}
