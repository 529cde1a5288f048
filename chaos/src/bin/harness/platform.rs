//! The fake messaging platform the replicas talk to, and what it writes down.
//!
//! - `POST /send`: every reply a replica sends. Like the payment and messaging APIs that take
//!   one, it delivers a send repeated under the same idempotency key once.
//! - The polling transport, shaped like Telegram's `getUpdates`: the users' messages wait in
//!   one queue; `POST /session/open` and `/session/close` bracket a replica's session, and
//!   `POST /updates` long-polls from an offset, confirming every update before it. A message
//!   counts as acknowledged (safe with the bot) once a poll confirmed it, on behalf of the
//!   replica whose session polled. Every poll is written down with its session and when it was
//!   in flight, for the check that no two replicas poll at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use botmesh_chaos::check::{Acked, Polled, Sent, Session};
use botmesh_chaos::record::{Delivery, PlatformSend, Poll, Reply, SessionRequest, Update, now_ns};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The most updates one poll returns.
const BATCH: usize = 100;

/// What the platform and the load generator write down while the run goes on.
#[derive(Default)]
pub(crate) struct Tape {
    /// Messages the bot took: acknowledged to the load generator, or confirmed by a poll.
    pub(crate) acked: Vec<Acked>,
    /// Replies received.
    pub(crate) sent: Vec<Sent>,
    /// Webhook deliveries the load generator had to make again.
    pub(crate) refused: u64,
    /// Idempotency keys of the sends delivered.
    keys: HashSet<String>,
    /// Sends repeated under a key already delivered, delivered once.
    pub(crate) deduplicated: u64,
    /// The polling transport's queue: every polled message, in the order users sent them.
    updates: Vec<Delivery>,
    /// How many of `updates` a poll confirmed.
    confirmed: usize,
    /// Polling sessions, in the order they opened.
    pub(crate) sessions: Vec<Session>,
    /// Every poll, once it ended.
    pub(crate) polls: Vec<Polled>,
}

/// The platform's state, shared by its routes and the load generator.
#[derive(Default)]
pub(crate) struct Platform {
    tape: Mutex<Tape>,
    /// A user's message joined the polling queue.
    queued: Notify,
    /// A poll confirmed updates.
    confirmed: Notify,
}

impl Platform {
    pub(crate) fn tape(&self) -> MutexGuard<'_, Tape> {
        self.tape.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The routes the replicas call.
    pub(crate) fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/send", post(send))
            .route("/session/open", post(open))
            .route("/session/close", post(close))
            .route("/updates", post(updates))
            .with_state(Arc::clone(self))
    }

    /// Queues a user's message for the polling session; returns its place in the queue.
    pub(crate) fn queue(&self, delivery: Delivery) -> usize {
        let mut tape = self.tape();
        tape.updates.push(delivery);
        let place = tape.updates.len() - 1;
        drop(tape);
        self.queued.notify_waiters();
        place
    }

    /// Waits until a poll confirmed the update at `place`, or `until` passed; whether it was.
    pub(crate) async fn confirmed(&self, place: usize, until: Instant) -> bool {
        loop {
            let notified = self.confirmed.notified();
            if self.tape().confirmed > place {
                return true;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return self.tape().confirmed > place,
            }
        }
    }

    /// The replica of the newest polling session, if one is open.
    pub(crate) fn holder(&self) -> Option<String> {
        let tape = self.tape();
        let newest = tape.sessions.last()?;
        newest.closed.is_none().then(|| newest.replica.clone())
    }

    /// The replica that opened `session`.
    fn replica_of(tape: &Tape, session: u64) -> String {
        let found = tape.sessions.iter().find(|s| s.id == session);
        found.map_or_else(|| "?".to_owned(), |s| s.replica.clone())
    }
}

async fn send(
    State(platform): State<Arc<Platform>>,
    headers: HeaderMap,
    Json(send): Json<PlatformSend>,
) -> StatusCode {
    let t = now_ns();
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut tape = platform.tape();
    if let Some(key) = &key
        && !tape.keys.insert(key.clone())
    {
        tape.deduplicated += 1;
        return StatusCode::OK;
    }
    let chat = send.chat.strip_prefix('c').and_then(|c| c.parse().ok());
    match (chat, Reply::parse(&send.text)) {
        (Some(chat), Some(reply)) => {
            tape.sent.push(Sent {
                chat,
                seq: reply.seq,
                kind: reply.kind,
                fence: reply.fence,
                replica: send.replica,
                t,
                key,
            });
            StatusCode::OK
        }
        _ => StatusCode::BAD_REQUEST,
    }
}

async fn open(
    State(platform): State<Arc<Platform>>,
    Json(request): Json<SessionRequest>,
) -> Json<SessionRequest> {
    let mut tape = platform.tape();
    let id = tape.sessions.len() as u64 + 1;
    let replica = request.replica;
    tape.sessions.push(Session { id, replica: replica.clone(), opened: now_ns(), closed: None });
    Json(SessionRequest { replica, session: id })
}

async fn close(State(platform): State<Arc<Platform>>, Json(request): Json<SessionRequest>) {
    let mut tape = platform.tape();
    if let Some(session) = tape.sessions.iter_mut().find(|s| s.id == request.session) {
        session.closed.get_or_insert_with(now_ns);
    }
}

/// Writes a poll down when it ends, however it ends (its connection may drop first).
struct InFlight {
    platform: Arc<Platform>,
    session: u64,
    replica: String,
    start: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let polled = Polled {
            session: self.session,
            replica: std::mem::take(&mut self.replica),
            start: self.start,
            end: now_ns(),
        };
        self.platform.tape().polls.push(polled);
    }
}

async fn updates(
    State(platform): State<Arc<Platform>>,
    Json(poll): Json<Poll>,
) -> Json<Vec<Update>> {
    let start = now_ns();
    let replica = {
        let mut tape = platform.tape();
        let replica = Platform::replica_of(&tape, poll.session);
        // The offset confirms everything before it: those messages are the bot's now.
        let upto = usize::try_from(poll.offset).unwrap_or(usize::MAX).min(tape.updates.len());
        if upto > tape.confirmed {
            let from = tape.confirmed;
            for i in from..upto {
                let d = &tape.updates[i];
                let acked = Acked { chat: d.chat, seq: d.seq, replica: replica.clone(), t: start };
                tape.acked.push(acked);
            }
            tape.confirmed = upto;
            platform.confirmed.notify_waiters();
        }
        replica
    };
    let _in_flight =
        InFlight { platform: Arc::clone(&platform), session: poll.session, replica, start };
    let deadline = Instant::now() + Duration::from_millis(poll.timeout_ms.min(5_000));
    loop {
        let queued = platform.queued.notified();
        {
            let tape = platform.tape();
            let from = usize::try_from(poll.offset).unwrap_or(usize::MAX).max(tape.confirmed);
            if from < tape.updates.len() {
                let batch = tape.updates[from..].iter().take(BATCH).enumerate();
                let batch =
                    batch.map(|(i, d)| Update { id: (from + i) as u64, delivery: d.clone() });
                return Json(batch.collect());
            }
        }
        tokio::select! {
            () = queued => {}
            () = tokio::time::sleep_until(deadline) => return Json(Vec::new()),
        }
    }
}
