//! One gateway connection: serenity's shard and its runner, driven here rather than by
//! serenity's shard manager, so that this provider decides when to connect and the connection
//! is closed before `stop` returns.
//!
//! serenity's runner needs a shard manager to report to. Its manager is given a gateway URL
//! that cannot be parsed, so whatever it queues to start by itself (a restart the runner asks
//! for) never connects: reconnecting is the supervisor's call alone, and two sessions of one
//! replica never overlap. A shutdown notice is queued in advance, so a restart the runner asks
//! for returns at once instead of waiting five seconds with its socket open.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use botmesh_traits::{Inbound, TransportStatus};
use serenity::gateway::{
    CollectorCallback, ShardManager, ShardManagerOptions, ShardMessenger, ShardRunner,
    ShardRunnerInfo, ShardRunnerOptions,
};
use serenity::gateway::{ConnectionStage, Shard};
use serenity::model::event::Event;
use serenity::model::gateway::ShardInfo;
use serenity::model::id::ShardId;
use tokio::sync::{Mutex as AsyncMutex, RwLock, mpsc};

use crate::inbound::map_event;
use crate::state::{Inner, lock};

/// How a session ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// `stop` closed it.
    Stopped,
    /// It can never work again as set up (the token or the intents are refused).
    Fatal(serenity::Error),
    /// The connection failed or was lost; `healthy` says whether Discord acknowledged a
    /// heartbeat on it.
    Lost { healthy: bool },
}

/// Connects to `url`, runs the session until it ends, and hands what arrives to `arrivals`.
pub(crate) async fn run(
    inner: &Arc<Inner>,
    url: String,
    arrivals: &mpsc::Sender<Vec<Inbound>>,
) -> Ended {
    let info = ShardInfo { id: ShardId(0), total: 1 };
    let connecting = Shard::new(
        Arc::new(AsyncMutex::new(url)),
        &inner.settings.token,
        info,
        inner.settings.intents,
        None,
    );
    let shard = tokio::select! {
        shard = connecting => shard,
        // Nothing was identified yet: the half-open connection is dropped.
        () = inner.stopped() => return Ended::Stopped,
    };
    let mut shard = match shard {
        Ok(shard) => shard,
        Err(e) => {
            tracing::debug!(target: "botmesh", provider = inner.id(), error = %e, "connecting to the gateway failed");
            return Ended::Lost { healthy: false };
        }
    };
    // What `READY` says the application is, for calls of the user's own through `http()`
    // (registering slash commands needs it).
    let http = Arc::clone(&inner.http);
    shard.set_application_id_callback(move |id| http.set_application_id(id));
    let data = Arc::new(RwLock::new(serenity::prelude::TypeMap::new()));
    let (manager, returned) = ShardManager::new(ShardManagerOptions {
        data: Arc::clone(&data),
        event_handlers: Vec::new(),
        raw_event_handlers: Vec::new(),
        shard_index: 0,
        shard_init: 1,
        shard_total: 1,
        // Never connects: see the module docs.
        ws_url: Arc::new(AsyncMutex::new(String::new())),
        http: Arc::clone(&inner.http),
        intents: inner.settings.intents,
        presence: None,
    });
    let mut runner = ShardRunner::new(ShardRunnerOptions {
        data,
        event_handlers: Vec::new(),
        raw_event_handlers: Vec::new(),
        manager: Arc::clone(&manager),
        shard,
        http: Arc::clone(&inner.http),
    });
    let messenger = ShardMessenger::new(&runner);
    let runner_info = || ShardRunnerInfo {
        latency: None,
        runner_tx: messenger.clone(),
        stage: ConnectionStage::Handshake,
    };
    manager.runners.lock().await.insert(ShardId(0), runner_info());
    manager.shutdown_finished(ShardId(0));
    let session = Arc::new(Session::default());
    messenger.add_collector(collector(inner, &session, arrivals.clone()));
    let stopping = {
        let mut gateway = lock(&inner.gateway);
        if !gateway.stopping {
            gateway.messenger = Some(messenger.clone());
        }
        gateway.stopping
    };
    if stopping {
        // Stopped while connecting: nothing was identified yet.
        teardown(&manager, runner_info()).await;
        drop(runner);
        return Ended::Stopped;
    }
    // A session counts as healthy once Discord acknowledged a heartbeat on it (the runner
    // then records a latency with its manager): only then does the supervisor's pause start
    // over, so a gateway that lets every session go stale is tried less and less often. After
    // a session that went stale, this is also when the transport opens (see `Inner::stale`).
    let acked = async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let runners = manager.runners.lock().await;
            if runners.get(&ShardId(0)).is_some_and(|r| r.latency.is_some()) {
                break;
            }
        }
        session.healthy.store(true, Ordering::SeqCst);
        if session.ready.load(Ordering::SeqCst) {
            inner.open(true);
        }
        std::future::pending::<()>().await;
    };
    // A stop asks the runner to close with 1000 (through its mailbox, which it reads between
    // two frames, up to half a second apart) and waits `close_timeout` for it; past that, the
    // connection is dropped here, which closes it just the same.
    let close_timeout = inner.settings.close_timeout;
    let stopped = inner.stopped();
    let ran = tokio::select! {
        ran = runner.run() => ran,
        () = acked => Ok(()),
        () = async { stopped.await; tokio::time::sleep(close_timeout).await } => Ok(()),
    };
    inner.set_status(TransportStatus::Closed);
    lock(&inner.gateway).messenger = None;
    // The manager's task is ended while the runner can still take its last message, then the
    // socket closes with the runner, before this returns and anything else connects.
    teardown(&manager, runner_info()).await;
    drop(runner);
    drop(returned);
    let stopping = lock(&inner.gateway).stopping;
    match ran {
        _ if stopping => Ended::Stopped,
        Err(e) if crate::errors::is_fatal(&e) => Ended::Fatal(e),
        Err(e) => {
            tracing::debug!(target: "botmesh", provider = inner.id(), error = %e, "gateway session failed");
            Ended::Lost { healthy: session.healthy.load(Ordering::SeqCst) }
        }
        Ok(()) => Ended::Lost { healthy: session.healthy.load(Ordering::SeqCst) },
    }
}

/// What the collector and the heartbeat watch learn of one session.
#[derive(Default)]
struct Session {
    /// `READY` or `RESUMED` arrived.
    ready: AtomicBool,
    /// Discord acknowledged a heartbeat.
    healthy: AtomicBool,
}

/// Ends the manager's own task: it is told to shut the (finished) runner down, which returns at
/// once on the notice queued for it, and then to shut down itself.
async fn teardown(manager: &Arc<ShardManager>, info: ShardRunnerInfo) {
    manager.runners.lock().await.insert(ShardId(0), info);
    manager.shutdown_finished(ShardId(0));
    let _ = tokio::time::timeout(Duration::from_secs(6), manager.shutdown_all()).await;
}

/// What the runner calls with each dispatch, in order, on its own task: `READY` and
/// `RESUMED` open the transport (see [`Inner::open`]), the rest is mapped and queued for the
/// bot.
fn collector(
    inner: &Arc<Inner>,
    session: &Arc<Session>,
    arrivals: mpsc::Sender<Vec<Inbound>>,
) -> CollectorCallback {
    let inner = Arc::clone(inner);
    let session = Arc::clone(session);
    let ready = move |inner: &Inner| {
        session.ready.store(true, Ordering::SeqCst);
        inner.open(session.healthy.load(Ordering::SeqCst));
    };
    CollectorCallback(Box::new(move |event: &Event| {
        match event {
            Event::Ready(r) => {
                *lock(&inner.me) = Some(r.ready.user.id.get());
                ready(&inner);
            }
            Event::Resumed(_) => ready(&inner),
            event => {
                let arrival = map_event(inner.id(), inner.me(), event);
                // Discord waits 3 s for an interaction's answer: given at once, in the
                // background, before the press queues behind anything.
                if let Some(ack) = arrival.ack {
                    tokio::spawn(crate::interaction::acknowledge(Arc::clone(&inner), ack));
                }
                if !arrival.messages.is_empty() {
                    queue(&inner, &arrivals, arrival.messages);
                }
            }
        }
        true
    }))
}

/// Queues what one event delivered for the bot. Discord never delivers it again, but memory is
/// bounded: when the queue is full (the bot has not taken that many events, its journal being
/// down), the event is dropped and reported.
fn queue(inner: &Inner, arrivals: &mpsc::Sender<Vec<Inbound>>, messages: Vec<Inbound>) {
    match arrivals.try_send(messages) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(messages)) => {
            let limit = inner.settings.queue_limit;
            crate::handing::report_dropped(
                inner,
                &messages,
                &format!("{limit} gateway events already wait for the bot to take them"),
            );
        }
        // Only once a stop ended the handing over, which waits for the session to close.
        Err(mpsc::error::TrySendError::Closed(messages)) => {
            crate::handing::report_dropped(inner, &messages, "the provider is stopping");
        }
    }
}
