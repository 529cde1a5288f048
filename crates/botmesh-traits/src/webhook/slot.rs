//! The slot a webhook provider keeps its [`Intake`] in while it runs.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use crate::{Inbound, Intake, Verdict};

/// Where a webhook provider keeps the [`Intake`] it was given, from
/// [`Provider::start`](crate::Provider::start) until [`Provider::stop`](crate::Provider::stop).
///
/// Handlers hold a clone and hand each message to [`accept`](Self::accept). While the slot is
/// closed they answer [`Verdict::Unavailable`], so the platform delivers the message again, to
/// another replica or to this one once it runs again. Cheap to clone: every clone is the same
/// slot.
///
/// The time from [`open`](Self::open) to [`close`](Self::close) is a session;
/// [`closed`](Self::closed) waits for one to end, which is how the provider's server learns
/// that it should shut down.
#[derive(Debug, Clone, Default)]
pub struct IntakeSlot {
    state: Arc<watch::Sender<Session>>,
}

/// What the slot holds right now.
#[derive(Debug, Default)]
struct Session {
    /// The intake while open.
    intake: Option<Intake>,
    /// How many sessions were opened: the current one's number while open, the last one's
    /// while closed.
    number: u64,
}

impl IntakeSlot {
    /// A closed slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the slot: messages go to `intake` from now on. Opening an open slot replaces its
    /// intake and keeps the session going.
    pub fn open(&self, intake: Intake) {
        self.state.send_modify(|session| {
            if session.intake.is_none() {
                session.number += 1;
            }
            session.intake = Some(intake);
        });
    }

    /// Closes the slot, ending its session: messages are answered [`Verdict::Unavailable`]
    /// from now on. Messages already handed in keep their course. Closing a closed slot does
    /// nothing.
    pub fn close(&self) {
        self.state.send_if_modified(|session| session.intake.take().is_some());
    }

    /// Whether the slot is open.
    pub fn is_open(&self) -> bool {
        self.state.borrow().intake.is_some()
    }

    /// Hands `message` to the open intake and answers its [`Verdict`];
    /// [`Verdict::Unavailable`] while the slot is closed.
    pub async fn accept(&self, message: Inbound) -> Verdict {
        // Cloned out so that no lock on the slot is held while the bot takes the message.
        let intake = self.state.borrow().intake.clone();
        match intake {
            Some(intake) => intake.accept(message).await,
            None => Verdict::Unavailable,
        }
    }

    /// Resolves once the session open at this call ends, or, when the slot is closed at this
    /// call, once the next session ends: hand it to [`serve`](super::serve) right after
    /// [`open`](Self::open) and the server stops when the provider is stopped.
    ///
    /// The future owns what it needs, so it outlives `self`. It also resolves once every clone
    /// of the slot is dropped, as no one is left to close it then.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut watch = self.state.subscribe();
        let awaited = {
            let now = watch.borrow_and_update();
            match now.intake {
                Some(_) => now.number,
                None => now.number + 1,
            }
        };
        async move {
            // An error means the slot is gone, which ends its session too.
            let _ = watch
                .wait_for(|s| s.number > awaited || (s.number == awaited && s.intake.is_none()))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use tokio::time::timeout;
    use tower::ServiceExt;

    use super::*;
    use crate::Admit;

    /// Queues every message it is given.
    #[derive(Default)]
    struct Queue(Mutex<Vec<Inbound>>);

    #[async_trait]
    impl Admit for Queue {
        async fn admit(&self, message: Inbound) -> Verdict {
            self.0.lock().unwrap().push(message);
            Verdict::Queued
        }
    }

    async fn hook(State(slot): State<IntakeSlot>, body: String) -> Verdict {
        slot.accept(Inbound::text("ignored", "m1", "c1", body)).await
    }

    async fn post_hi(slot: &IntakeSlot) -> (StatusCode, String) {
        let router = Router::new().route("/hook", post(hook)).with_state(slot.clone());
        let request = Request::post("/hook").body(Body::from("hi")).unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// Whether `future` is still pending after a long while. The clock is paused in these
    /// tests, so the wait is skipped once nothing else can run: the answer is immediate and
    /// does not depend on the machine's speed.
    async fn pending(future: impl Future<Output = ()>) -> bool {
        timeout(Duration::from_secs(3600), future).await.is_err()
    }

    #[tokio::test]
    async fn a_route_answers_503_until_opened_and_again_after_closed() {
        let slot = IntakeSlot::new();
        let queue = Arc::new(Queue::default());
        assert_eq!(post_hi(&slot).await, (StatusCode::SERVICE_UNAVAILABLE, "unavailable".into()));
        assert!(!slot.is_open());

        slot.open(Intake::new("tg", Arc::clone(&queue) as Arc<dyn Admit>));
        assert!(slot.is_open());
        assert_eq!(post_hi(&slot).await, (StatusCode::OK, "queued".into()));

        slot.close();
        assert!(!slot.is_open());
        assert_eq!(post_hi(&slot).await, (StatusCode::SERVICE_UNAVAILABLE, "unavailable".into()));

        let queued = queue.0.lock().unwrap();
        assert_eq!(queued.len(), 1, "only the message sent while open reaches the bot");
        assert_eq!((queued[0].provider.as_str(), queued[0].id.as_str()), ("tg", "m1"));
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_once_the_open_session_is_closed() {
        let slot = IntakeSlot::new();
        slot.open(Intake::closed("tg"));
        assert!(pending(slot.closed()).await, "the session is still open");

        let closed = slot.closed();
        slot.close();
        // Generous: it resolves at once; the bound only keeps a broken slot from hanging.
        assert!(timeout(Duration::from_secs(5), closed).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn closed_waits_for_the_next_session_while_the_slot_is_closed() {
        let slot = IntakeSlot::new();
        assert!(pending(slot.closed()).await, "a never opened slot is not closed yet");

        slot.open(Intake::closed("tg"));
        slot.close();
        let mut next = Box::pin(slot.closed());
        assert!(pending(&mut next).await, "the ended session does not count");

        slot.open(Intake::closed("tg"));
        slot.open(Intake::closed("tg"));
        assert!(pending(&mut next).await, "opening an open slot ends no session");

        slot.close();
        assert!(timeout(Duration::from_secs(5), next).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_when_the_session_ends_between_call_and_poll() {
        let slot = IntakeSlot::new();
        slot.open(Intake::closed("tg"));
        let closed = slot.closed();
        slot.close();
        slot.open(Intake::closed("tg"));
        assert!(timeout(Duration::from_secs(5), closed).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_when_the_slot_is_dropped() {
        let slot = IntakeSlot::new();
        slot.open(Intake::closed("tg"));
        let closed = slot.closed();
        drop(slot);
        assert!(timeout(Duration::from_secs(5), closed).await.is_ok());
    }
}
