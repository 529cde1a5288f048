//! A provider driven by a test.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use botmesh_traits::{
    Capabilities, Delivery, Error, Inbound, InboundStream, Intake, MessageId, Outbound, Provider,
    ProviderEvent, Result, SendReceipt, TransportStatus, Verdict, async_trait,
};
use std::pin::Pin;
use std::task::{Context, Poll};

use botmesh_core::Bot;
use futures_util::Stream;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::sent_log::SentLog;

/// A provider that a test drives: it injects what users say and reads what the bot sent.
///
/// Clones share one transport, so a test keeps a clone after handing one to the bot.
#[derive(Clone, Debug)]
pub struct TestProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    capabilities: Capabilities,
    tx: Mutex<Option<mpsc::UnboundedSender<ProviderEvent>>>,
    /// The bot's intake while started: acknowledged deliveries go through it.
    intake: Mutex<Option<Intake>>,
    status: Mutex<TransportStatus>,
    sent: SentLog,
    next_id: AtomicU64,
    starts: AtomicUsize,
    /// Injected messages the bot has not yet taken from the stream.
    queued: AtomicUsize,
    drained: Notify,
    /// How many of the next sends fail.
    failing_sends: AtomicU32,
    /// How many of the next sends are throttled, and for how long each.
    throttled_sends: Mutex<(u32, std::time::Duration)>,
    /// How long each send takes before the message reaches the users.
    send_delay: Mutex<std::time::Duration>,
    /// When the transport was started (open) and stopped (closed).
    history: Mutex<Vec<(Instant, TransportStatus)>>,
}

impl Inner {
    fn taken(&self, n: usize) {
        if n > 0 && self.queued.fetch_sub(n, Ordering::SeqCst) == n {
            self.drained.notify_waiters();
        }
    }
}

/// The inbound stream. A message counts as taken once the bot comes back for the next event,
/// which it does only after it queued the previous one on its chat.
struct Counted {
    rx: mpsc::UnboundedReceiver<ProviderEvent>,
    inner: Arc<Inner>,
    owed: bool,
}

impl Stream for Counted {
    type Item = ProviderEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ProviderEvent>> {
        if std::mem::take(&mut self.owed) {
            self.inner.taken(1);
        }
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(ProviderEvent::Message(_))) = &polled {
            self.owed = true;
        }
        polled
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        // Whatever was not taken is gone with the stream.
        let left = usize::from(self.owed)
            + std::iter::from_fn(|| self.rx.try_recv().ok())
                .filter(|e| matches!(e, ProviderEvent::Message(_)))
                .count();
        self.inner.taken(left);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for TestProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl TestProvider {
    /// A shared-session provider with id `test`.
    pub fn new() -> Self {
        Self::with("test", Capabilities::shared())
    }

    /// A provider with the given id and capabilities (use [`Capabilities::exclusive`] to act as
    /// a WhatsApp Web session or a long-polling transport).
    pub fn with(id: impl Into<String>, capabilities: Capabilities) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: id.into(),
                capabilities,
                tx: Mutex::new(None),
                intake: Mutex::new(None),
                status: Mutex::new(TransportStatus::Closed),
                sent: SentLog::default(),
                next_id: AtomicU64::new(1),
                starts: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                drained: Notify::new(),
                failing_sends: AtomicU32::new(0),
                throttled_sends: Mutex::new((0, std::time::Duration::ZERO)),
                send_delay: Mutex::new(std::time::Duration::ZERO),
                history: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Delivers a message as if a user sent it. Returns `false` when the provider is not
    /// started (the message goes nowhere, as on a closed transport).
    pub fn inject(&self, message: Inbound) -> bool {
        let tx = lock(&self.inner.tx);
        let Some(tx) = tx.as_ref() else { return false };
        self.inner.queued.fetch_add(1, Ordering::SeqCst);
        if tx.send(ProviderEvent::Message(message)).is_err() {
            self.inner.taken(1);
            return false;
        }
        true
    }

    /// Delivers a message the way a webhook platform does: through the bot's intake, waiting
    /// for the verdict the platform would be answered with. [`Verdict::Unavailable`] when the
    /// provider is not started here.
    pub async fn deliver(&self, message: Inbound) -> Verdict {
        let intake = lock(&self.inner.intake).clone();
        match intake {
            Some(intake) => intake.accept(message).await,
            None => Verdict::Unavailable,
        }
    }

    /// The bot's intake while the provider is started here, for a test that keeps it past a
    /// stop, as a provider that still holds messages when its transport stops does (a gateway
    /// draining what it read).
    pub fn intake(&self) -> Option<Intake> {
        lock(&self.inner.intake).clone()
    }

    /// Reports a delivery or read receipt for a sent message, as a platform would.
    pub fn receipt(&self, delivery: Delivery) {
        if let Some(tx) = lock(&self.inner.tx).as_ref() {
            let _ = tx.send(ProviderEvent::Delivery(delivery));
        }
    }

    /// Waits until the bot has taken every injected message from the provider and handled
    /// everything it was handed: the point where a test can look at the results.
    pub async fn settled(&self, bot: &Bot) {
        loop {
            let drained = self.inner.drained.notified();
            if self.inner.queued.load(Ordering::SeqCst) == 0 {
                break;
            }
            drained.await;
        }
        bot.wait_idle().await;
    }

    /// Waits until several replicas, each with its own provider, have taken and handled
    /// everything injected into any of them.
    ///
    /// A message one replica takes may wait for its chat's turn on another, so settling each
    /// once is not enough: this settles them in turn until a pass finds all of them idle.
    ///
    /// ```
    /// # use botmesh_core::Bot;
    /// # use botmesh_testing::TestProvider;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (pa, pb) = (TestProvider::new(), TestProvider::new());
    /// let echo = |p: &TestProvider| {
    ///     Bot::builder()
    ///         .provider(p.clone())
    ///         .on_message(|ctx| async move {
    ///             ctx.reply(ctx.body()).await?;
    ///             Ok::<_, botmesh_core::BotError>(())
    ///         })
    ///         .build()
    /// };
    /// let (a, b) = (echo(&pa)?, echo(&pb)?);
    /// a.start().await?;
    /// b.start().await?;
    /// pa.say("c1", "to a");
    /// pb.say("c2", "to b");
    /// TestProvider::settled_all([(&pa, &a), (&pb, &b)]).await;
    /// assert_eq!(pa.texts_to("c1"), ["to a"]);
    /// assert_eq!(pb.texts_to("c2"), ["to b"]);
    /// # Ok(()) }
    /// ```
    pub async fn settled_all<'a>(replicas: impl IntoIterator<Item = (&'a Self, &'a Bot)>) {
        let replicas: Vec<_> = replicas.into_iter().collect();
        loop {
            for (provider, bot) in &replicas {
                provider.settled(bot).await;
            }
            let quiet =
                |(p, b): &(&Self, &Bot)| p.inner.queued.load(Ordering::SeqCst) == 0 && b.is_idle();
            if replicas.iter().all(quiet) {
                return;
            }
        }
    }

    /// A user of `chat` says `text`; returns the message id it was given.
    pub fn say(&self, chat: &str, text: &str) -> MessageId {
        let id = self.fresh_id();
        self.inject(Inbound::text(self.inner.id.as_str(), id.clone(), chat, text));
        id
    }

    /// `participant` says `text` in the group `chat`.
    pub fn say_in_group(&self, chat: &str, participant: &str, text: &str) -> MessageId {
        let id = self.fresh_id();
        self.inject(
            Inbound::text(self.inner.id.as_str(), id.clone(), chat, text).in_group(participant),
        );
        id
    }

    /// A message id not used before by this provider.
    pub fn fresh_id(&self) -> MessageId {
        MessageId::from(format!("m{}", self.inner.next_id.fetch_add(1, Ordering::Relaxed)))
    }

    /// Everything the bot sent so far, in order.
    pub fn sent(&self) -> Vec<Outbound> {
        self.inner.sent.all()
    }

    /// How many messages the bot sent so far.
    pub fn sent_count(&self) -> usize {
        self.inner.sent.count()
    }

    /// Takes everything sent so far, leaving the log empty.
    pub fn take_sent(&self) -> Vec<Outbound> {
        self.inner.sent.take()
    }

    /// The texts the bot sent to `chat`, in order.
    pub fn texts_to(&self, chat: &str) -> Vec<String> {
        self.inner.sent.texts_to(chat)
    }

    /// Waits until the bot has sent at least `n` messages in all.
    pub async fn wait_sent(&self, n: usize) {
        self.inner.sent.wait(n).await;
    }

    /// Reports the transport as open, as a reconnect would.
    pub fn open(&self) {
        self.set_status(TransportStatus::Open);
    }

    /// Reports the transport as closed, as a logout or a lost connection would.
    pub fn close(&self) {
        self.set_status(TransportStatus::Closed);
    }

    /// How many times the provider was started.
    pub fn starts(&self) -> usize {
        self.inner.starts.load(Ordering::SeqCst)
    }

    /// When the bot started the transport ([`TransportStatus::Open`]) and stopped it
    /// ([`TransportStatus::Closed`]), in order.
    pub fn history(&self) -> Vec<(Instant, TransportStatus)> {
        lock(&self.inner.history).clone()
    }

    /// Makes every later send take `delay` before the message reaches the users, as a slow
    /// platform or a frozen connection does; a send dropped meanwhile never arrives.
    pub fn delay_sends(&self, delay: std::time::Duration) {
        *lock(&self.inner.send_delay) = delay;
    }

    /// Makes the next `count` sends fail with a provider error, as a platform that refuses
    /// them would; the messages are not delivered.
    pub fn fail_sends(&self, count: u32) {
        self.inner.failing_sends.store(count, Ordering::SeqCst);
    }

    /// Makes the next `count` sends fail with [`Error::RateLimited`] asking to wait
    /// `retry_after`, as a throttling platform does; the messages are not delivered.
    pub fn rate_limit_sends(&self, count: u32, retry_after: std::time::Duration) {
        *lock(&self.inner.throttled_sends) = (count, retry_after);
    }

    fn set_status(&self, status: TransportStatus) {
        *lock(&self.inner.status) = status;
        if let Some(tx) = lock(&self.inner.tx).as_ref() {
            let _ = tx.send(ProviderEvent::Status(status));
        }
    }
}

#[async_trait]
impl Provider for TestProvider {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities
    }

    async fn start(&self, intake: Intake) -> Result<InboundStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.inner.tx) = Some(tx);
        *lock(&self.inner.intake) = Some(intake);
        self.inner.starts.fetch_add(1, Ordering::SeqCst);
        lock(&self.inner.history).push((Instant::now(), TransportStatus::Open));
        self.set_status(TransportStatus::Open);
        Ok(Box::pin(Counted { rx, inner: Arc::clone(&self.inner), owed: false }))
    }

    async fn stop(&self) -> Result<()> {
        *lock(&self.inner.status) = TransportStatus::Closed;
        lock(&self.inner.tx).take();
        lock(&self.inner.intake).take();
        lock(&self.inner.history).push((Instant::now(), TransportStatus::Closed));
        Ok(())
    }

    async fn send(&self, message: &Outbound) -> Result<SendReceipt> {
        let delay = *lock(&self.inner.send_delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if *lock(&self.inner.status) != TransportStatus::Open {
            return Err(Error::TransportClosed { provider: self.inner.id.clone() });
        }
        {
            let mut throttled = lock(&self.inner.throttled_sends);
            if throttled.0 > 0 {
                throttled.0 -= 1;
                return Err(Error::RateLimited { retry_after: throttled.1 });
            }
        }
        let failing = &self.inner.failing_sends;
        if failing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(Error::provider(&self.inner.id, "send", "the test failed this send"));
        }
        let id = format!("out{}", self.inner.sent.push(message));
        Ok(SendReceipt::new(Some(MessageId::from(id))))
    }

    fn status(&self) -> TransportStatus {
        *lock(&self.inner.status)
    }
}
