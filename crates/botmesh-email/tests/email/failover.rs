//! Three replicas on one mailbox: one IMAP session at a time (as Dovecot counts them), and a
//! leader crashed during IDLE replaced by a standby that resumes after the stored UID, with
//! every mail handled exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_core::traits::Store;
use botmesh_core::{Bot, BotError, Durability, MemoryStore};
use botmesh_testing::MemoryCoordinationHub;
use botmesh_testing::MemoryCoordinator;
use botmesh_testing::email::{DovecotServer, SmtpSink};
use tokio::time::Instant;

#[allow(clippy::wildcard_imports, reason = "the helpers every test module uses")]
use crate::support::*;

type Counts = Arc<Mutex<HashMap<String, usize>>>;

fn echo(bot: botmesh_core::BotBuilder, counts: &Counts) -> botmesh_core::BotBuilder {
    let counts = Arc::clone(counts);
    bot.on_message(move |ctx| {
        let counts = Arc::clone(&counts);
        async move {
            *counts.lock().unwrap().entry(ctx.message().inbound.id.to_string()).or_default() += 1;
            ctx.reply(format!("echo {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        }
    })
}

/// Delivers mails `range` from ten correspondents, in a thread (as a mail server would),
/// `pause` apart.
fn deliver(
    server: &Arc<DovecotServer>,
    range: std::ops::Range<usize>,
    pause: Duration,
) -> tokio::task::JoinHandle<()> {
    let server = Arc::clone(server);
    tokio::task::spawn_blocking(move || {
        for i in range {
            let from = format!("user{}@example.org", i % 10);
            let raw = mail(&from, &format!("m{i}@example.org"), "Hello", &format!("mail {i}"), &[]);
            server.deliver(&raw).unwrap();
            #[allow(clippy::disallowed_methods, reason = "a blocking thread of its own")]
            std::thread::sleep(pause);
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_read_one_mailbox_one_session_at_a_time_and_a_standby_resumes_after_a_crash()
{
    let server = Arc::new(DovecotServer::start().unwrap());
    let sink = SmtpSink::start().await.unwrap();
    let hub = MemoryCoordinationHub::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let counts: Counts = Arc::default();
    let mut replicas: Vec<(Arc<MemoryCoordinator>, Bot)> = Vec::new();
    let watch = server.watch_sessions();
    for id in ["a", "b", "c"] {
        let (coordinator, coordination) = replica(&hub, id);
        let builder = Bot::builder()
            .provider(provider(&server, &sink))
            .store(Arc::clone(&store))
            .coordination(coordination)
            .durability(Durability::new());
        let bot = echo(builder, &counts).build().unwrap();
        bot.start().await.unwrap();
        replicas.push((coordinator, bot));
    }
    let leader = |replicas: &[(Arc<MemoryCoordinator>, Bot)]| {
        replicas.iter().position(|(_, b)| b.runs_transport("email"))
    };
    until("a replica reads the mailbox", || leader(&replicas).is_some()).await;
    deliver(&server, 0..100, Duration::ZERO).await.unwrap();
    until("the first 100 mails are handled", || counts.lock().unwrap().len() >= 100).await;
    // Everything is handled: the leader waits in IDLE now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = leader(&replicas).unwrap();
    let t0 = Instant::now();
    replicas[old].0.crash();
    // Delivered while the leader is dead, while the standby takes over and after: one every
    // 30 ms (about 5 s in all), so that a hundred `dovecot-lda` processes at once do not
    // compete with the takeover being timed.
    let second = deliver(&server, 100..200, Duration::from_millis(30));
    let deadline = Instant::now() + WITHIN;
    while !replicas.iter().enumerate().any(|(i, (_, b))| i != old && b.runs_transport("email")) {
        assert!(Instant::now() < deadline, "no standby took over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took_over = t0.elapsed();
    eprintln!("a standby took the session over {took_over:?} after the crash");
    // A standby campaigns every lease / 3 and wins once the dead leader's lease ran out: the
    // bound is `lease + lease / 3` (2.67 s). The second of slack covers starting the provider
    // (a login and a SELECT on Dovecot) and the scheduling delays of a two-core machine that
    // runs other tests and these deliveries meanwhile.
    assert!(
        took_over <= LEASE + LEASE / 3 + Duration::from_secs(1),
        "took over after {took_over:?}"
    );
    second.await.unwrap();
    let deadline = Instant::now() + WITHIN;
    while counts.lock().unwrap().len() < 200 {
        let handled = counts.lock().unwrap().len();
        let flags = server.flags("INBOX").unwrap();
        let unseen: Vec<u32> =
            flags.iter().filter(|(_, f)| !f.contains("\\Seen")).map(|(u, _)| *u).collect();
        assert!(Instant::now() < deadline, "{handled} of 200 handled; unseen: {unseen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Room for a late repeat to show up.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.len(), 200, "every mail handled");
    // Handled exactly once means one reply per mail: the effect. A handler may run again only
    // for a mail whose turn the crashed replica held (its reply was refused, or deduplicated by
    // the outbox), so at most one mail per correspondent, ten in all; a mail read twice from
    // the mailbox would show far more.
    let again: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(again.len() <= 10, "handlers ran again for more than the crash explains: {again:?}");
    let mut replies: HashMap<String, usize> = HashMap::new();
    for mail in sink.mails() {
        *replies.entry(mail.text()).or_default() += 1;
    }
    for i in 0..200 {
        let n = replies.get(&format!("echo mail {i}")).copied().unwrap_or(0);
        assert_eq!(n, 1, "mail {i} answered {n} times");
    }
    assert_eq!(sink.mails().len(), 200, "one reply per mail, nothing else");
    watch.stop();
    eprintln!("Dovecot sampled {} times, at most {} session(s)", watch.samples(), watch.max());
    assert!(watch.samples() > 20, "Dovecot was watched: {:?}", watch.errors());
    assert_eq!(watch.max(), 1, "never two IMAP sessions at once, as Dovecot saw them");
    let flags = server.flags("INBOX").unwrap();
    assert_eq!(flags.len(), 200);
    assert!(flags.iter().all(|(_, f)| f.contains("\\Seen")), "every mail flagged seen");
    for (_, bot) in &replicas {
        bot.stop().await.unwrap();
    }
}
