//! What was read from the gateway while the bot cannot take it: offered again, handed over
//! at a stop, bounded, and reported when dropped.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::{Admit, Intake, Provider, ProviderEvent, Verdict, async_trait};
use botmesh_core::{Inbound, TransportStatus};
use botmesh_discord::DiscordProvider;
use botmesh_testing::discord::{Author, DiscordServer};
use futures_util::StreamExt;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

/// The bot's side of the intake: takes each message after `delay`, or none while `down`.
struct Journal {
    down: AtomicBool,
    delay: Duration,
    offered: AtomicUsize,
    taken: Mutex<Vec<String>>,
}

impl Journal {
    fn new(down: bool, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            down: AtomicBool::new(down),
            delay,
            offered: AtomicUsize::new(0),
            taken: Mutex::default(),
        })
    }

    fn taken(&self) -> Vec<String> {
        self.taken.lock().unwrap().clone()
    }
}

#[async_trait]
impl Admit for Journal {
    async fn admit(&self, message: Inbound) -> Verdict {
        self.offered.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        if self.down.load(Ordering::SeqCst) {
            return Verdict::Unavailable;
        }
        self.taken.lock().unwrap().push(message.id.as_str().to_owned());
        Verdict::Queued
    }
}

type Seen = Arc<Mutex<Vec<ProviderEvent>>>;

/// What a started provider reported, recorded as it comes.
struct Recorded {
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Recorded {
    /// Everything the provider reported, once its stream ended (at the stop).
    async fn ended(self) -> Seen {
        tokio::time::timeout(WITHIN, self.task).await.unwrap().unwrap();
        self.seen
    }
}

/// Starts `provider` on `journal`, records what it reports, and waits for the session.
async fn started(provider: &DiscordProvider, journal: &Arc<Journal>) -> Recorded {
    let intake = Intake::new("discord", Arc::clone(journal) as Arc<dyn Admit>);
    let mut stream = provider.start(intake).await.unwrap();
    let seen: Seen = Arc::default();
    let kept = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            kept.lock().unwrap().push(event);
        }
    });
    until("the transport opens", || provider.status() == TransportStatus::Open).await;
    Recorded { seen, task }
}

/// The reasons of the `Rejected` events among `seen`.
fn rejected(seen: &Seen) -> Vec<String> {
    let seen = seen.lock().unwrap();
    seen.iter()
        .filter_map(|e| match e {
            ProviderEvent::Rejected { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// User `u` says something in DM channel 7; the message's id.
fn says(server: &DiscordServer, u: u64) -> String {
    server.user_says(7, &Author::dm(u, "u"), "hi").to_string()
}

/// Five users each say something in DM channel 7; their message ids.
fn five_say(server: &DiscordServer) -> Vec<String> {
    (1..=5).map(|u| says(server, u)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_hands_what_was_read_to_the_bot_before_it_returns() {
    let server = DiscordServer::start().await.unwrap();
    let provider = discord(&server).with_close_timeout(Duration::from_secs(3));
    // 300 ms a message: five take 1.5 s, well past the moment of the stop.
    let journal = Journal::new(false, Duration::from_millis(300));
    let recorded = started(&provider, &journal).await;
    let ids = five_say(&server);
    until("the first message is offered", || journal.offered.load(Ordering::SeqCst) >= 1).await;
    // Reading the other four frames off the local websocket takes a few milliseconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(journal.taken().len() < 5, "all taken before the stop: nothing to show");
    provider.stop().await.unwrap();
    assert_eq!(journal.taken(), ids, "handed over in order before the stop returned");
    assert_eq!(rejected(&recorded.ended().await), Vec::<String>::new());
    // The server notices the closed socket a moment after the stop returns.
    until("the session is closed", || server.live_sessions() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_reports_what_the_bot_could_not_take() {
    let server = DiscordServer::start().await.unwrap();
    let provider = discord(&server);
    let journal = Journal::new(true, Duration::ZERO);
    let recorded = started(&provider, &journal).await;
    let ids = five_say(&server);
    until("the first message is offered", || journal.offered.load(Ordering::SeqCst) >= 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = tokio::time::Instant::now();
    provider.stop().await.unwrap();
    // The close timeout (150 ms) to close the session, as long again to hand over, and slack
    // for a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(3), "stopped after {:?}", t0.elapsed());
    let reasons = rejected(&recorded.ended().await);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].starts_with("5 messages dropped"), "{reasons:?}");
    for id in &ids {
        assert!(reasons[0].contains(id.as_str()), "{id} missing from {reasons:?}");
    }
    assert!(journal.taken().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_bot_cannot_take_messages_at_most_the_queue_limit_wait() {
    let server = DiscordServer::start().await.unwrap();
    let provider = discord(&server).with_queue_limit(2);
    let journal = Journal::new(true, Duration::ZERO);
    let recorded = started(&provider, &journal).await;
    let seen = Arc::clone(&recorded.seen);
    // The first message is being offered (again and again) before the others arrive, so two
    // of them wait and the last two find the queue full.
    let mut ids = vec![says(&server, 1)];
    until("the first message is offered", || journal.offered.load(Ordering::SeqCst) >= 1).await;
    ids.extend((2..=5).map(|u| says(&server, u)));
    let last = ids.last().unwrap().clone();
    until("the last message is dropped", || rejected(&seen).iter().any(|r| r.contains(&last)))
        .await;
    let full = rejected(&seen);
    assert!(
        full.len() == 2
            && full
                .iter()
                .zip(&ids[3..])
                .all(|(r, id)| r.contains("already wait") && r.contains(id)),
        "the last two dropped as they came: {full:?}"
    );
    provider.stop().await.unwrap();
    // The rest is reported at the stop: every message once, none lost unsaid.
    let reasons = rejected(&recorded.ended().await);
    for id in &ids {
        let times = reasons.iter().filter(|r| r.contains(id.as_str())).count();
        assert_eq!(times, 1, "{id} in {reasons:?}");
    }
}
