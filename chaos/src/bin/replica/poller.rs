//! The exclusive transport: a long-polling session on the harness's platform, one at a time,
//! like a Telegram poller or a WhatsApp Web session.
//!
//! `start` opens a session and polls in a loop; each update goes to the bot through the intake,
//! and the next poll's offset confirms only what the bot took. Before each poll the loop asks
//! the intake whether the transport is still this replica's (`Intake::holds_transport`): after
//! a freeze longer than the lease another replica may poll already, and this one must not. `stop`
//! ends the loop (a poll in flight is dropped, closing its connection) and closes the session
//! before it returns, so the bot gives the leadership up only once nothing polls here.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use botmesh_chaos::record::{
    POLL_PROVIDER, Poll, Record, SessionRequest, Update, chat_id, message_id, now_ns,
};
use botmesh_core::traits::{
    Capabilities, InboundStream, Intake, Provider, ProviderEvent, async_trait,
};
use botmesh_core::{Error, Inbound, Outbound, SendReceipt, TransportStatus};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::log::Log;
use crate::platform::Platform;

/// How long the platform holds a poll with nothing new, at most: a quarter of the lease when
/// that is shorter, so a poll in flight when its replica froze or died has ended before another
/// replica may lead.
const POLL_TIMEOUT: Duration = Duration::from_millis(300);

/// The session while it runs: its id, the loop, and how to stop it.
struct Running {
    session: u64,
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

/// The polling provider.
pub(crate) struct Poller {
    platform: Platform,
    /// How long the platform holds a poll.
    timeout: Duration,
    running: Mutex<Option<Running>>,
    status: watch::Sender<TransportStatus>,
}

impl Poller {
    pub(crate) fn new(platform: Platform, lease: Duration) -> Self {
        Self {
            platform,
            timeout: POLL_TIMEOUT.min(lease / 4),
            running: Mutex::new(None),
            status: watch::channel(TransportStatus::Closed).0,
        }
    }
}

fn failed(op: &'static str) -> impl Fn(reqwest::Error) -> Error {
    move |e| Error::provider(POLL_PROVIDER, op, e)
}

/// The loop of one session: polls, hands each update to the bot, confirms what it took.
async fn poll(
    session: u64,
    platform: Platform,
    timeout: Duration,
    intake: Intake,
    mut stop: watch::Receiver<bool>,
) {
    let log: &Log = &platform.log;
    let mut offset = 0;
    while !*stop.borrow() {
        if !intake.holds_transport() {
            // The leases lapsed: another replica may poll now. The bot stops this loop.
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(Duration::from_millis(20)) => continue,
            }
        }
        log.history.write(&Record::Polling { session, replica: log.replica.clone(), t: now_ns() });
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(300);
        let request = platform
            .client
            .post(platform.url("updates"))
            .json(&Poll { session, offset, timeout_ms })
            .send();
        let answered = tokio::select! {
            _ = stop.changed() => return,
            answered = request => answered,
        };
        let updates: Vec<Update> = match answered {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "a poll failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for update in updates {
            let d = &update.delivery;
            let inbound = Inbound::text(
                POLL_PROVIDER,
                message_id(d.chat, d.seq),
                chat_id(d.chat),
                d.body.clone(),
            );
            let verdict = intake.accept(inbound).await;
            if !verdict.is_taken() {
                // Left for the next poll, which asks from here again.
                tracing::warn!(verdict = %verdict, "refused an update; polling it again");
                tokio::time::sleep(Duration::from_millis(50)).await;
                break;
            }
            log.accepted(d.chat, d.seq, now_ns());
            offset = update.id + 1;
        }
    }
}

#[async_trait]
impl Provider for Poller {
    fn id(&self) -> &str {
        POLL_PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::exclusive()
    }

    async fn start(&self, intake: Intake) -> botmesh_core::traits::Result<InboundStream> {
        let platform = &self.platform;
        let open = SessionRequest { replica: platform.log.replica.clone(), session: 0 };
        let opened: SessionRequest = platform
            .client
            .post(platform.url("session/open"))
            .json(&open)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed("open a session"))?
            .json()
            .await
            .map_err(failed("open a session"))?;
        let (stop, stopped) = watch::channel(false);
        let task =
            tokio::spawn(poll(opened.session, platform.clone(), self.timeout, intake, stopped));
        let old = self.running.lock().unwrap_or_else(PoisonError::into_inner).replace(Running {
            session: opened.session,
            task,
            stop,
        });
        if let Some(old) = old {
            old.task.abort();
        }
        self.status.send_replace(TransportStatus::Open);
        let open =
            futures_util::stream::once(async { ProviderEvent::Status(TransportStatus::Open) });
        // The stream ends with the session: nothing else travels on it.
        let mut status = self.status.subscribe();
        let end = futures_util::stream::once(async move {
            let _ = status.wait_for(|s| *s == TransportStatus::Closed).await;
        })
        .filter_map(|()| async { None });
        Ok(Box::pin(open.chain(end)))
    }

    async fn stop(&self) -> botmesh_core::traits::Result<()> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(Running { session, task, stop }) = running {
            let _ = stop.send(true);
            // Dropping a poll in flight closes its connection: nothing polls here after this.
            let _ = task.await;
            let platform = &self.platform;
            let close = SessionRequest { replica: platform.log.replica.clone(), session };
            let closed = platform.client.post(platform.url("session/close")).json(&close).send();
            if let Err(e) = closed.await {
                tracing::warn!(error = %e, "closing the session failed");
            }
        }
        self.status.send_replace(TransportStatus::Closed);
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> botmesh_core::traits::Result<SendReceipt> {
        self.platform.send(POLL_PROVIDER, message).await
    }

    fn status(&self) -> TransportStatus {
        *self.status.borrow()
    }
}
