//! How a stop learns that a transport's reader has read everything its stream already holds.
//!
//! A provider may yield a burst on its inbound stream just before the bot stops, and the task
//! reading the stream may not have run since. Those messages were delivered: a long-polling
//! transport confirmed them to its platform already, a gateway never sends them again. So a
//! stop asks each reader to catch up before it drains the chats, and waits for the answer. A
//! reader answers a question once it polled its stream after the question was asked and found
//! nothing ready (or its stream ended), and it polls again only after it queued what it read
//! before: once the answer came, everything delivered before the question is on its chat.

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use futures_util::{Stream, StreamExt};
use tokio::sync::watch;

/// The questions a stop asks one reader, and the reader's answers.
pub(crate) struct CatchUp {
    /// How many questions were asked so far.
    asked: AtomicU64,
    /// The last question the reader answered; `u64::MAX` once it ended.
    answered: watch::Sender<u64>,
    /// Wakes the reader for a question while its stream is idle.
    reader: AtomicWaker,
}

impl CatchUp {
    pub(crate) fn new() -> Self {
        Self { asked: AtomicU64::new(0), answered: watch::channel(0).0, reader: AtomicWaker::new() }
    }

    /// The reader's side: polls `stream` for its next event and, when it has none ready,
    /// answers every question asked before the poll.
    ///
    /// On the message path this costs one atomic load per event; the reader's waker is
    /// registered only when the stream is idle.
    pub(crate) fn poll_next<S: Stream + Unpin>(
        &self,
        stream: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<Option<S::Item>> {
        let asked = self.asked.load(Ordering::SeqCst);
        let polled = stream.poll_next_unpin(cx);
        if polled.is_pending() {
            self.reader.register(cx.waker());
            if self.asked.load(Ordering::SeqCst) == asked {
                self.answer(asked);
            } else {
                // Asked after that poll: what arrived meanwhile is read before answering.
                cx.waker().wake_by_ref();
            }
        }
        polled
    }

    /// The reader ended (its stream ended, or the task was dropped): nothing is left to read.
    pub(crate) fn ended(&self) {
        self.answer(u64::MAX);
    }

    fn answer(&self, question: u64) {
        self.answered.send_if_modified(|answered| {
            let newer = *answered < question;
            if newer {
                *answered = question;
            }
            newer
        });
    }

    /// Waits until the reader has queued everything its stream held when this was called.
    pub(crate) async fn wait(&self) {
        let question = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut answers = self.answered.subscribe();
        self.reader.wake();
        // The sender lives in `self`: the wait ends with an answer.
        let _ = answers.wait_for(|answered| *answered >= question).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures_util::future::poll_fn;
    use tokio::sync::mpsc;

    use super::CatchUp;

    /// A reader of a channel that forwards what it read, and the catch-up it answers.
    fn reader(
        mut rx: mpsc::UnboundedReceiver<u32>,
        read: mpsc::UnboundedSender<u32>,
    ) -> (Arc<CatchUp>, tokio::task::JoinHandle<()>) {
        let catch_up = Arc::new(CatchUp::new());
        let ours = Arc::clone(&catch_up);
        let task = tokio::spawn(async move {
            let mut stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
            while let Some(n) = poll_fn(|cx| ours.poll_next(&mut stream, cx)).await {
                let _ = read.send(n);
            }
            ours.ended();
        });
        (catch_up, task)
    }

    #[tokio::test(start_paused = true)]
    async fn the_answer_comes_only_once_everything_sent_before_the_question_was_read() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (read_tx, mut read) = mpsc::unbounded_channel();
        let (catch_up, _task) = reader(rx, read_tx);
        // The reader is idle: it has answered nothing yet, and has not run.
        for n in 0..100 {
            tx.send(n).unwrap();
        }
        catch_up.wait().await;
        let got: Vec<u32> = std::iter::from_fn(|| read.try_recv().ok()).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_reader_answers_at_once_and_an_ended_one_answers_every_question() {
        let (tx, rx) = mpsc::unbounded_channel::<u32>();
        let (read_tx, _read) = mpsc::unbounded_channel();
        let (catch_up, task) = reader(rx, read_tx);
        tokio::time::sleep(Duration::from_millis(1)).await;
        tokio::time::timeout(Duration::from_secs(1), catch_up.wait()).await.unwrap();
        drop(tx);
        task.await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), catch_up.wait()).await.unwrap();
    }
}
