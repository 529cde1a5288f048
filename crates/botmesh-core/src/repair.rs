//! The replica's repair queue: journal writes that must land eventually and failed when first
//! tried.
//!
//! An acknowledgement that does not land leaves a handled message pending under a live
//! replica, in front of the chat's later messages; a release that does not land keeps a
//! message from the chat's next holder; an append that a refused delivery gave up on may still
//! land, and must then be released for the sender's next delivery. Each such write is queued
//! here, and one task per running bot tries the queued writes again with the retry policy
//! (see [`crate::retry`]) until they land. The task ends with [`Bot::stop`](crate::Bot::stop),
//! which tries what is left once more; what still fails stays queued for the next start, and
//! the journal keeps the message meanwhile (a dead owner's records are taken over).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use backon::ExponentialBackoff;
use botmesh_traits::{ChatKey, Error, InboxState, JournalStore, Store};
use futures_util::future::join_all;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::event::EventBus;
use crate::lock::lock;
use crate::telemetry::Tally;

use crate::coordination::RELEASED;

/// When a delivery refused after its append gave up looks again whether the append landed:
/// the append may sit in a frozen server's buffer for a while. A look the store does not
/// answer does not count: it is made again, at the last of these waits, until one is.
const LANDING_LOOKS: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(200),
    Duration::from_secs(1),
    Duration::from_secs(4),
];

/// A journal write to land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Repair {
    /// Acknowledge journaled message `id` of chat `key`.
    Ack {
        /// The chat, for the error events.
        key: ChatKey,
        /// The journal id.
        id: String,
    },
    /// Release journaled message `id`, owned by `from`, for the chat's next holder.
    Release {
        /// The chat, for the error events.
        key: ChatKey,
        /// The journal id.
        id: String,
        /// Its owner.
        from: String,
    },
    /// Release journaled message `id` if the append of a delivery refused here landed after
    /// all, so that the sender's next delivery takes it over. Looked at [`LANDING_LOOKS`]
    /// after the refusal; `look` counts the looks taken.
    Landing {
        /// The journal id.
        id: String,
        /// The looks taken so far.
        look: usize,
    },
}

/// What one try of a repair came to.
enum Tried {
    /// It landed, or there is nothing left to do.
    Done,
    /// Try it again after the next wait.
    Again(Repair),
}

struct Queued {
    repair: Repair,
    due: Instant,
    backoff: ExponentialBackoff,
}

impl Queued {
    fn new(repair: Repair) -> Self {
        let mut backoff = crate::retry::backoff();
        let due = match &repair {
            Repair::Landing { look, .. } => Instant::now() + landing_wait(*look),
            _ => Instant::now() + backoff.next().unwrap_or(crate::retry::MAX_DELAY),
        };
        Self { repair, due, backoff }
    }
}

fn landing_wait(look: usize) -> Duration {
    LANDING_LOOKS.get(look).copied().unwrap_or(Duration::ZERO)
}

/// What the repair queue writes through: the bot's store, its events for failures, and this
/// replica's journal owner id.
#[derive(Clone, Copy)]
pub(crate) struct Journal<'a> {
    /// The store holding the journal.
    pub(crate) store: &'a dyn Store,
    /// Where failures are reported.
    pub(crate) events: &'a EventBus,
    /// This replica's owner id in the journal.
    pub(crate) owner: &'a str,
}

impl<'a> Journal<'a> {
    /// The store's inbox journal. [`BotBuilder::build`](crate::BotBuilder::build) refuses
    /// durability with a store without one, so only a bot without durability finds it missing,
    /// and gets [`Error::Unsupported`].
    pub(crate) fn inbox(self) -> Result<&'a dyn JournalStore, Error> {
        self.store.journal().ok_or(Error::Unsupported { op: "the inbox journal" })
    }
}

/// The queue of one bot's journal writes still to land.
pub(crate) struct Repairs {
    queue: Mutex<Vec<Queued>>,
    /// Journal ids of deliveries refused here whose append may still land (see
    /// [`Repair::Landing`]); a later delivery this replica takes removes its id. Held across
    /// a look and its release, so a delivery taking the message here waits for it rather than
    /// racing it.
    landing: tokio::sync::Mutex<HashSet<String>>,
    wake: Notify,
    /// `true` while the bot stops: the task ends after its pass.
    stopping: watch::Sender<bool>,
    /// How many writes are queued, for the metrics and the replica's status.
    backlog: Tally,
}

impl Repairs {
    pub(crate) fn new(backlog: Tally) -> Self {
        Self {
            backlog,
            queue: Mutex::new(Vec::new()),
            landing: tokio::sync::Mutex::default(),
            wake: Notify::new(),
            stopping: watch::channel(false).0,
        }
    }

    /// How many writes wait in the queue.
    pub(crate) fn backlog(&self) -> usize {
        self.backlog.get()
    }

    /// Watches a refused delivery's journal append, releasing it if it lands after all. Called
    /// before the refusal is answered, so that a retry taken here finds it watched.
    pub(crate) async fn watch_landing(&self, id: String) {
        self.landing.lock().await.insert(id.clone());
        self.push(Repair::Landing { id, look: 0 });
    }

    /// Stops watching `id`'s append: a later delivery of it is taken here. Waits for a look
    /// in progress, so the look cannot release it afterwards.
    pub(crate) async fn taken_here(&self, id: &str) {
        self.landing.lock().await.remove(id);
    }

    /// Queues `repair`, to be tried after its first wait.
    pub(crate) fn push(&self, repair: Repair) {
        let mut queue = lock(&self.queue);
        queue.push(Queued::new(repair));
        self.backlog.set(queue.len());
        drop(queue);
        self.wake.notify_one();
    }

    /// Tries the queued writes as they fall due, until [`Repairs::stop`]. A pass that started
    /// runs to its end, so no write is dropped half-tried.
    /// Call [`Repairs::open`] first.
    pub(crate) async fn run(&self, journal: Journal<'_>) {
        let mut stopping = self.stopping.subscribe();
        loop {
            let next = lock(&self.queue).iter().map(|q| q.due).min();
            tokio::select! {
                biased;
                _ = stopping.wait_for(|s| *s) => return,
                () = self.wake.notified() => continue,
                () = sleep_until(next) => {}
            }
            let due: Vec<Queued> = {
                let mut queue = lock(&self.queue);
                let now = Instant::now();
                let (due, later) =
                    std::mem::take(&mut *queue).into_iter().partition(|q| q.due <= now);
                *queue = later;
                due
            };
            self.pass(journal, due).await;
        }
    }

    /// Lets [`Repairs::run`] run until the next [`Repairs::stop`]: called before its task is
    /// spawned, so a stop that comes before the task first runs is not forgotten.
    pub(crate) fn open(&self) {
        self.stopping.send_replace(false);
    }

    /// Ends [`Repairs::run`] once its pass is over.
    pub(crate) fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// Tries every queued write once, due or not: the last pass at stop. What still fails
    /// stays queued.
    pub(crate) async fn flush(&self, journal: Journal<'_>) {
        let all = std::mem::take(&mut *lock(&self.queue));
        self.pass(journal, all).await;
    }

    /// Tries `due` together, and queues again what did not land.
    async fn pass(&self, journal: Journal<'_>, due: Vec<Queued>) {
        if due.is_empty() {
            return;
        }
        let tried = join_all(due.into_iter().map(|mut q| async move {
            match self.try_once(journal, q.repair).await {
                Tried::Done => None,
                Tried::Again(repair @ Repair::Landing { .. }) => Some(Queued::new(repair)),
                Tried::Again(repair) => {
                    q.due = Instant::now() + q.backoff.next().unwrap_or(crate::retry::MAX_DELAY);
                    q.repair = repair;
                    Some(q)
                }
            }
        }))
        .await;
        let mut queue = lock(&self.queue);
        queue.extend(tried.into_iter().flatten());
        self.backlog.set(queue.len());
    }

    /// Tries `repair` once, reporting a failure.
    async fn try_once(&self, journal: Journal<'_>, repair: Repair) -> Tried {
        let inbox = match journal.inbox() {
            Ok(inbox) => inbox,
            Err(e) => {
                // Without a journal, the write can never land.
                journal.events.error(None, e.into());
                return Tried::Done;
            }
        };
        match repair {
            Repair::Ack { key, id } => match inbox.inbox_ack(&id).await {
                Ok(()) => Tried::Done,
                Err(e) => {
                    journal.events.error(Some(&key), e.into());
                    Tried::Again(Repair::Ack { key, id })
                }
            },
            Repair::Release { key, id, from } => {
                match inbox.inbox_claim(&id, &from, RELEASED).await {
                    Ok(_) => Tried::Done,
                    Err(e) => {
                        journal.events.error(Some(&key), e.into());
                        Tried::Again(Repair::Release { key, id, from })
                    }
                }
            }
            Repair::Landing { id, look } => self.look_landed(journal, inbox, id, look + 1).await,
        }
    }

    /// One look at whether a refused delivery's append landed, releasing it if it did.
    async fn look_landed(
        &self,
        journal: Journal<'_>,
        inbox: &dyn JournalStore,
        id: String,
        look: usize,
    ) -> Tried {
        // Held through the look and the release: a later delivery of it taken here waits for this
        // look, and takes it from `released` if it came too late.
        let mut landing = self.landing.lock().await;
        if !landing.contains(&id) {
            // A later delivery of it was taken here, and is queued.
            return Tried::Done;
        }
        // A look the store did not answer is no look: the append may land the moment the
        // store is back, and a record left pending under this live replica would be refused
        // to every later delivery. Looked at again, at the longest wait, until it answers.
        let unanswered =
            Tried::Again(Repair::Landing { id: id.clone(), look: LANDING_LOOKS.len() - 1 });
        let done = match inbox.inbox_get(&id).await {
            Ok(Some(r)) if r.state == InboxState::Pending && r.owner == journal.owner => {
                match inbox.inbox_claim(&id, journal.owner, RELEASED).await {
                    Ok(_) => true,
                    Err(e) => {
                        journal.events.error(None, e.into());
                        return unanswered;
                    }
                }
            }
            // Taken by now (acknowledged, adopted): nothing to release.
            Ok(Some(_)) => true,
            Ok(None) => false,
            Err(_) => return unanswered,
        };
        if done || look >= LANDING_LOOKS.len() {
            landing.remove(&id);
            return Tried::Done;
        }
        Tried::Again(Repair::Landing { id, look })
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
