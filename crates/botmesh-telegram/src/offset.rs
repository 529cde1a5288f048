//! The poller's offset, kept in the bot's store so that the replica that takes polling over
//! resumes after the last update the old poller handed to the bot.

use std::sync::Arc;

use botmesh_traits::{CasOutcome, CheckpointWrite, Error, Result, Store};

/// The next update id to ask for, as a row of the bot's store (`{"next": n}`), only ever
/// moved forward: a poller that stalled and wakes up late cannot move it back.
pub(crate) struct Offset {
    store: Option<Arc<dyn Store>>,
    key: String,
}

/// How often a write that lost a race is tried again before it is left to the next batch.
const RACES: usize = 3;

impl Offset {
    pub(crate) fn new(store: Option<Arc<dyn Store>>, provider: &str) -> Self {
        Self { store, key: format!("botmesh:provider:{provider}:offset") }
    }

    /// The next update id to ask for: 0 (whatever Telegram still holds) when none was kept.
    pub(crate) async fn load(&self) -> Result<i32> {
        let Some(store) = &self.store else { return Ok(0) };
        Ok(store.get_checkpoint(&self.key).await?.map_or(0, |row| next_in(&row.data)))
    }

    /// Records that every update below `next` was handed to the bot.
    pub(crate) async fn save(&self, next: i32) -> Result<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let write = CheckpointWrite::new(serde_json::json!({ "next": next }).to_string());
        for _ in 0..RACES {
            let row = store.get_checkpoint(&self.key).await?;
            if row.as_ref().is_some_and(|r| next_in(&r.data) >= next) {
                return Ok(());
            }
            let expected = row.map(|r| r.revision);
            match store.set_checkpoint_if(&self.key, &write, expected).await {
                Ok(CasOutcome::Written { .. }) => return Ok(()),
                Ok(_) => {}
                // A store without compare-and-set: the plain write, last writer wins.
                Err(Error::Unsupported { .. }) => {
                    return store.set_checkpoint(&self.key, &write).await.map(|_| ());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn next_in(data: &str) -> i32 {
    serde_json::from_str::<serde_json::Value>(data)
        .ok()
        .and_then(|v| v.get("next").and_then(serde_json::Value::as_i64))
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0)
}
