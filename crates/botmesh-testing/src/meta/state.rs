//! The stand-in's state: the business's ids, what the bot sent, stored media, the users'
//! customer service windows, queued faults, and the webhook outbox with its per-user order.
//!
//! One `std::sync::Mutex` guards it all and is never held across an `.await`. Two `Notify`s
//! wake waiters: `wake` (the outbox or the subscribers changed: the webhook sender) and
//! `changed` (anything was recorded: the test's `wait_for_*` helpers).

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::channel::Channel;
use super::faults::Fault;
use super::records::{Delivery, SentMessage};
use super::signature;

/// How long after a user's last message a WhatsApp business may send them any message; after
/// it, only templates.
pub(super) const WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// What a server is started with.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) app_secret: String,
    pub(super) verify_token: String,
    /// The one token accepted, or `None` for any non-empty token.
    pub(super) access_token: Option<String>,
    /// The version segment of [`GraphServer::api_url`](super::GraphServer::api_url).
    pub(super) api_version: String,
    pub(super) waba_id: String,
    pub(super) phone_number_id: String,
    pub(super) display_phone_number: String,
    pub(super) page_id: String,
    pub(super) instagram_id: String,
    /// The first delay before a failed delivery is retried; it doubles up to `retry_max`.
    pub(super) retry_first: Duration,
    pub(super) retry_max: Duration,
}

impl Config {
    /// The channel a business id in a send's path stands for; `me` is the page, unless
    /// `recipient` is known only as an Instagram user.
    pub(super) fn channel_of(&self, node: &str, inner: &Inner, recipient: &str) -> Option<Channel> {
        if node == self.phone_number_id {
            Some(Channel::WhatsApp)
        } else if node == self.page_id {
            Some(Channel::Messenger)
        } else if node == self.instagram_id {
            Some(Channel::Instagram)
        } else if node == "me" {
            let instagram_only = inner.wrote.contains(&(Channel::Instagram, recipient.to_owned()))
                && !inner.wrote.contains(&(Channel::Messenger, recipient.to_owned()));
            Some(if instagram_only { Channel::Instagram } else { Channel::Messenger })
        } else {
            None
        }
    }
}

/// Bytes the stand-in serves as media.
#[derive(Debug, Clone)]
pub(super) struct StoredMedia {
    pub(super) bytes: Vec<u8>,
    pub(super) mime_type: String,
    /// Lowercase hex SHA-256 of the bytes.
    pub(super) sha256: String,
}

/// A webhook body waiting for a 2xx.
#[derive(Debug, Clone)]
pub(super) struct Queued {
    pub(super) delivery_id: u64,
    pub(super) channel: Channel,
    /// The ordering keys of the users the body concerns.
    pub(super) users: Vec<(Channel, String)>,
    pub(super) message_ids: Vec<String>,
    pub(super) body: String,
    /// Whether a sender task is working on it.
    pub(super) in_flight: bool,
}

/// A body the sender may post now: the users it concerns have nothing older pending.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub(super) delivery_id: u64,
    pub(super) channel: Channel,
    pub(super) message_ids: Vec<String>,
    pub(super) body: String,
    /// The subscriber (round-robin index) of the first attempt; each retry takes the next.
    pub(super) first_subscriber: usize,
}

/// Everything behind the lock.
#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) sent: Vec<SentMessage>,
    /// WhatsApp messages the bot marked as read, by id.
    pub(super) marked_read: Vec<String>,
    next_media: u64,
    pub(super) media: HashMap<String, StoredMedia>,
    /// When each WhatsApp user last wrote, for the customer service window.
    pub(super) last_inbound: HashMap<String, Instant>,
    /// Who sent each WhatsApp message: a `wa_id`, or the business's display number for the
    /// bot's. A reply's `context.from` names them.
    pub(super) authors: HashMap<String, String>,
    /// Every `(channel, user)` that has written, to tell who `/me/messages` is for.
    pub(super) wrote: HashSet<(Channel, String)>,
    pub(super) faults: HashMap<Channel, VecDeque<Fault>>,
    pub(super) token_expired: bool,
    pub(super) subscribers: Vec<String>,
    next_subscriber: usize,
    next_delivery: u64,
    /// Bodies not yet taken with a 2xx, oldest first.
    pub(super) outbox: VecDeque<Queued>,
    pub(super) deliveries: Vec<Delivery>,
}

impl Inner {
    /// Stores media and issues its id: sixteen digits, like Meta's.
    pub(super) fn store_media(&mut self, bytes: Vec<u8>, mime_type: &str) -> String {
        self.next_media += 1;
        let id = format!("{}", 1_000_000_000_000_000 + self.next_media);
        let sha256 = signature::sha256_hex(&bytes);
        self.media
            .insert(id.clone(), StoredMedia { bytes, mime_type: mime_type.to_owned(), sha256 });
        id
    }

    /// Whether a WhatsApp user wrote within the last 24 hours.
    pub(super) fn in_window(&self, wa_id: &str) -> bool {
        self.last_inbound.get(wa_id).is_some_and(|at| at.elapsed() < WINDOW)
    }

    /// Takes the next fault queued for a channel.
    pub(super) fn take_fault(&mut self, channel: Channel) -> Option<Fault> {
        let queued = self.faults.get_mut(&channel)?;
        let fault = queued.pop_front();
        if queued.is_empty() {
            self.faults.remove(&channel);
        }
        fault
    }

    /// Queues a webhook body; returns its delivery id.
    pub(super) fn enqueue(
        &mut self,
        channel: Channel,
        users: Vec<(Channel, String)>,
        message_ids: Vec<String>,
        body: String,
    ) -> u64 {
        self.next_delivery += 1;
        let delivery_id = self.next_delivery;
        self.outbox.push_back(Queued {
            delivery_id,
            channel,
            users,
            message_ids,
            body,
            in_flight: false,
        });
        delivery_id
    }

    /// The bodies that may go now, marked in flight: those not in flight whose users have no
    /// older body pending. Nothing goes while there is no subscriber.
    pub(super) fn take_ready(&mut self) -> Vec<Job> {
        if self.subscribers.is_empty() {
            return Vec::new();
        }
        let mut busy: HashSet<(Channel, String)> = HashSet::new();
        let mut ready = Vec::new();
        for queued in &mut self.outbox {
            let free = queued.users.iter().all(|u| !busy.contains(u));
            if free && !queued.in_flight {
                queued.in_flight = true;
                ready.push(Job {
                    delivery_id: queued.delivery_id,
                    channel: queued.channel,
                    message_ids: queued.message_ids.clone(),
                    body: queued.body.clone(),
                    first_subscriber: self.next_subscriber,
                });
                self.next_subscriber = self.next_subscriber.wrapping_add(1);
            }
            busy.extend(queued.users.iter().cloned());
        }
        ready
    }

    /// The subscriber for a round-robin index, if there is any.
    pub(super) fn subscriber(&self, index: usize) -> Option<String> {
        let n = self.subscribers.len();
        (n > 0).then(|| self.subscribers[index % n].clone())
    }

    /// Forgets a body that was taken.
    pub(super) fn delivered(&mut self, delivery_id: u64) {
        self.outbox.retain(|q| q.delivery_id != delivery_id);
    }
}

/// The state shared by the HTTP handlers, the webhook sender and the test's handle.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: Config,
    /// `http://127.0.0.1:<port>`, without the version.
    pub(super) base_url: String,
    /// The webhook sender's client: plain http, no proxy.
    pub(super) http: reqwest::Client,
    inner: Mutex<Inner>,
    /// Woken when the outbox or the subscribers change, or the server stops.
    pub(super) wake: Notify,
    /// Woken whenever anything is recorded.
    changed: Notify,
    /// Becomes `true` once, when the server stops.
    closed: watch::Sender<bool>,
}

impl Shared {
    pub(super) fn new(config: Config, base_url: String, http: reqwest::Client) -> Self {
        Self {
            config,
            base_url,
            http,
            inner: Mutex::new(Inner::default()),
            wake: Notify::new(),
            changed: Notify::new(),
            closed: watch::Sender::new(false),
        }
    }

    /// The state, for reading; changes go through [`update`](Self::update).
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the state and wakes the test's waits.
    pub(super) fn update<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let r = f(&mut self.lock());
        self.changed.notify_waiters();
        r
    }

    /// Changes the state and wakes the webhook sender too.
    pub(super) fn update_outbox<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let r = self.update(f);
        self.wake.notify_waiters();
        r
    }

    /// Whether the server has stopped.
    pub(super) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the server stops.
    pub(super) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut closed = self.closed.subscribe();
        async move {
            // An error means the sender is gone, which also means stopped.
            let _ = closed.wait_for(|c| *c).await;
        }
    }

    /// Stops the webhook sender and the waits.
    pub(super) fn close(&self) {
        self.closed.send_replace(true);
        self.wake.notify_waiters();
        self.changed.notify_waiters();
    }

    /// Waits until `done` holds or `within` passes; says whether it holds.
    pub(super) async fn wait_until(&self, within: Duration, done: impl Fn(&Inner) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            if done(&self.lock()) {
                return true;
            }
            if self.is_closed() || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(&self.lock());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str) -> (Channel, String) {
        (Channel::WhatsApp, user.to_owned())
    }

    fn ready_ids(inner: &mut Inner) -> Vec<u64> {
        inner.take_ready().iter().map(|j| j.delivery_id).collect()
    }

    #[test]
    fn a_users_bodies_go_one_at_a_time_and_others_pass() {
        let mut inner = Inner::default();
        let a1 = inner.enqueue(Channel::WhatsApp, vec![key("a")], vec![], String::new());
        let a2 = inner.enqueue(Channel::WhatsApp, vec![key("a")], vec![], String::new());
        let b1 = inner.enqueue(Channel::WhatsApp, vec![key("b")], vec![], String::new());
        let ab = inner.enqueue(Channel::WhatsApp, vec![key("a"), key("b")], vec![], String::new());
        let c1 = inner.enqueue(Channel::WhatsApp, vec![key("c")], vec![], String::new());
        assert!(ready_ids(&mut inner).is_empty(), "nothing goes without a subscriber");
        inner.subscribers.push("http://x/".to_owned());
        assert_eq!(ready_ids(&mut inner), [a1, b1, c1]);
        assert!(ready_ids(&mut inner).is_empty(), "in flight already");
        inner.delivered(a1);
        assert_eq!(ready_ids(&mut inner), [a2]);
        inner.delivered(b1);
        inner.delivered(c1);
        assert!(ready_ids(&mut inner).is_empty(), "the batch waits for a2");
        inner.delivered(a2);
        assert_eq!(ready_ids(&mut inner), [ab]);
    }

    #[test]
    fn jobs_take_subscribers_round_robin() {
        let mut inner =
            Inner { subscribers: vec!["a".to_owned(), "b".to_owned()], ..Inner::default() };
        inner.enqueue(
            Channel::Messenger,
            vec![(Channel::Messenger, "1".to_owned())],
            vec![],
            String::new(),
        );
        inner.enqueue(
            Channel::Messenger,
            vec![(Channel::Messenger, "2".to_owned())],
            vec![],
            String::new(),
        );
        let firsts: Vec<_> = inner.take_ready().iter().map(|j| j.first_subscriber).collect();
        assert_eq!(firsts, [0, 1]);
        assert_eq!(inner.subscriber(3).as_deref(), Some("b"));
        assert_eq!(inner.subscriber(4).as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_closes_after_24_hours() {
        let mut inner = Inner::default();
        assert!(!inner.in_window("1"));
        inner.last_inbound.insert("1".to_owned(), Instant::now());
        tokio::time::advance(WINDOW - Duration::from_secs(1)).await;
        assert!(inner.in_window("1"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!inner.in_window("1"));
    }
}
