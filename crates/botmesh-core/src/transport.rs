//! Starting and stopping each provider's transport, and reading what its stream delivers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use botmesh_traits::{Error, Intake, ProviderEvent};
use futures_util::StreamExt;
use futures_util::future::join_all;
use tokio::sync::watch;

use crate::dispatcher::Dispatcher;
use crate::providers::Transport;
use crate::shared::Shared;
use crate::{BotError, Event, Result};

/// How long stopping a transport waits for its stream to deliver what it still holds.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Counts a stream as read until its reader ends or is aborted.
struct Reading(watch::Sender<usize>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
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
        let reading = Reading(self.streams.clone());
        let reader = tokio::spawn(async move {
            let _reading = reading;
            while let Some(event) = stream.next().await {
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
            && let Some(old) = slot.replace(reader)
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
        let Some(mut reader) = reader else { return Ok(()) };
        shared.providers.set_up(transport, false);
        let stopped = transport.provider.stop().await;
        // A stopped provider ends its stream.
        if tokio::time::timeout(DRAIN_GRACE, &mut reader).await.is_err() {
            tracing::warn!(target: "botmesh", provider = %transport.id, "provider stream did not end after stop; abandoning it");
            reader.abort();
        }
        stopped.map_err(Into::into)
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
