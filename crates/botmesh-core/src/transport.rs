//! Starting and stopping each provider's transport, and reading what its stream delivers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use botmesh_traits::{Error, Intake, ProviderEvent};
use futures_util::future::{join_all, poll_fn};
use tokio::sync::watch;

use crate::catch_up::CatchUp;
use crate::dispatcher::Dispatcher;
use crate::providers::Transport;
use crate::shared::Shared;
use crate::{BotError, Event, Result};

/// How long stopping a transport waits for its stream to deliver what it still holds.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Counts a stream as read until its reader ends or is aborted, and then answers every
/// question of its catch-up.
struct Reading {
    streams: watch::Sender<usize>,
    catch_up: Arc<CatchUp>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.streams.send_modify(|n| *n = n.saturating_sub(1));
        self.catch_up.ended();
    }
}

/// Starts and stops the bot's transports here; each [`Transport`] keeps the task reading its
/// stream while it runs.
pub(crate) struct Transports {
    /// How many inbound streams are still being read.
    streams: watch::Sender<usize>,
}

impl Transports {
    pub(crate) fn new() -> Self {
        Self { streams: watch::channel(0).0 }
    }

    /// Starts `transport` (a no-op when it runs already), handing it `intake`, and reads its
    /// stream into `dispatcher` until it ends.
    /// Refused once `stopping` is set, which is read under the transport's lock, so a start
    /// can never slip in after the stop that follows it.
    pub(crate) async fn start(
        &self,
        shared: &Arc<Shared>,
        dispatcher: &Arc<Dispatcher>,
        transport: &Transport,
        intake: Intake,
        stopping: &AtomicBool,
    ) -> Result<()> {
        let _serial = transport.serial.lock().await;
        if stopping.load(Ordering::SeqCst) {
            return Err(BotError::NotRunning);
        }
        if shared.providers.is_up(transport) {
            return Ok(());
        }
        let mut stream = transport.provider.start(intake).await?;
        let (dispatcher, events) = (Arc::clone(dispatcher), Arc::clone(shared));
        let provider = transport.id.to_string();
        self.streams.send_modify(|n| *n += 1);
        let catch_up = Arc::new(CatchUp::new());
        let reading = Reading { streams: self.streams.clone(), catch_up: Arc::clone(&catch_up) };
        let reader = tokio::spawn(async move {
            let catch_up = Arc::clone(&reading.catch_up);
            let _reading = reading;
            while let Some(event) = poll_fn(|cx| catch_up.poll_next(&mut stream, cx)).await {
                match event {
                    ProviderEvent::Message(mut m) => {
                        if *m.provider != *provider {
                            // The chat belongs to the provider that received it.
                            m.provider.clone_from(&provider);
                        }
                        // Computed once, here: the dispatcher keeps it.
                        let key = m.key();
                        // Refused: the bot is closed. The dispatcher reports its other refusals.
                        if let Err(e @ BotError::NotRunning) =
                            dispatcher.dispatch_keyed(key.clone(), m)
                        {
                            events.events.error(Some(&key), e);
                        }
                    }
                    ProviderEvent::Status(status) => {
                        events.events.emit(Event::Transport { provider: provider.clone(), status });
                    }
                    ProviderEvent::Rejected { reason } => {
                        events.events.error(None, Error::InvalidInput { reason }.into());
                    }
                    ProviderEvent::Failed { op, reason } => {
                        let failed = Error::provider(provider.as_str(), op, reason);
                        events.events.error(None, failed.into());
                    }
                    ProviderEvent::Delivery(delivery) => {
                        events
                            .events
                            .emit(Event::Delivery { provider: provider.clone(), delivery });
                    }
                    _ => {}
                }
            }
        });
        if let Ok(mut slot) = transport.reader.lock()
            && let Some((old, _)) = slot.replace((reader, catch_up))
        {
            // A stream that ended by itself (the platform hung up) left its reader behind.
            old.abort();
        }
        shared.providers.set_up(transport, true);
        Ok(())
    }

    /// Stops `transport` if it runs here, and lets what its stream still holds reach the
    /// queues.
    pub(crate) async fn stop(&self, shared: &Shared, transport: &Transport) -> Result<()> {
        let _serial = transport.serial.lock().await;
        let reader = transport.reader.lock().ok().and_then(|mut slot| slot.take());
        let Some((mut reader, _)) = reader else { return Ok(()) };
        shared.providers.set_up(transport, false);
        let stopped = transport.provider.stop().await;
        // A stopped provider ends its stream.
        if tokio::time::timeout(DRAIN_GRACE, &mut reader).await.is_err() {
            tracing::warn!(target: "botmesh", provider = %transport.id, "provider stream did not end after stop; abandoning it");
            reader.abort();
        }
        stopped.map_err(Into::into)
    }

    /// Waits until every transport's reader has queued what its stream held when this was
    /// called: a stop drains the chats only then, so that what a transport delivered before
    /// the stop is answered while the transport is still up.
    pub(crate) async fn catch_up(&self, shared: &Shared) {
        let readers: Vec<Arc<CatchUp>> = shared
            .providers
            .iter()
            .filter_map(|t| Some(Arc::clone(&t.reader.lock().ok()?.as_ref()?.1)))
            .collect();
        join_all(readers.iter().map(|reader| reader.wait())).await;
    }

    /// Stops every transport that runs here, all at once; the first failure is returned once
    /// all stopped.
    pub(crate) async fn stop_all(&self, shared: &Shared) -> Result<()> {
        let stops = shared.providers.iter().map(|transport| self.stop(shared, transport));
        join_all(stops).await.into_iter().find(Result::is_err).unwrap_or(Ok(()))
    }

    /// Waits until no inbound stream is read any more.
    pub(crate) async fn closed(&self) {
        let mut rx = self.streams.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}
