//! Telegram's throttling, remembered: after a `429`, calls for that chat (or, after one on a
//! call for no chat in particular, every call) wait until Telegram's `retry_after` is over,
//! instead of asking again early and prolonging the penalty.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under this lock.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Until when each chat, and the whole bot (`None`), must not be sent to.
#[derive(Default)]
pub(crate) struct Pauses {
    until: Mutex<HashMap<Option<i64>, Instant>>,
}

impl Pauses {
    /// Telegram asked to wait `wait` before the next call for `chat` (`None`: any call).
    pub(crate) fn pause(&self, chat: Option<i64>, wait: Duration) {
        let until = Instant::now() + wait;
        let mut map = lock(&self.until);
        let now = Instant::now();
        map.retain(|_, t| *t > now);
        let entry = map.entry(chat).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// Waits until calls for `chat` may be made again.
    pub(crate) async fn wait(&self, chat: Option<i64>) {
        let until = {
            let map = lock(&self.until);
            let global = map.get(&None).copied();
            let own = chat.and_then(|c| map.get(&Some(c)).copied());
            global.into_iter().chain(own).max()
        };
        if let Some(until) = until.filter(|t| *t > Instant::now()) {
            tokio::time::sleep_until(until).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_chat_waits_out_its_own_pause_and_the_bot_s_but_not_another_chat_s() {
        let pauses = Pauses::default();
        pauses.pause(Some(1), Duration::from_secs(3));
        let t0 = Instant::now();
        pauses.wait(Some(2)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "another chat is not held up");
        pauses.wait(Some(1)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        pauses.pause(None, Duration::from_secs(2));
        pauses.wait(Some(2)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(5), "a pause of the bot holds every chat");
    }
}
