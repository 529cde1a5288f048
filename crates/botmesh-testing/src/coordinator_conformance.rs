//! The coordinator conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failed expectation is a failed test, reported by its panic"
)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_traits::{
    ChatKey, Coordinator, ErrorKind, LeaderEntry, ReleaseOptions, Result, Ticket, TurnGrant,
};
use tokio::task::JoinHandle;

/// A coordination backend under test, as [`coordinator_conformance`] drives it.
///
/// Implement it in a backend crate's tests: each call starts one more replica on the same
/// shared backend (the same Redis server and prefix, the same
/// [`MemoryCoordinationHub`](crate::MemoryCoordinationHub)).
pub trait CoordinatorHarness: Send + Sync {
    /// A new coordinator for replica `id` on the shared backend. Every call is a new
    /// incarnation, like a process started with that replica id, even when `id` repeats.
    fn replica(&self, id: &str) -> impl Future<Output = Arc<dyn Coordinator>> + Send;
}

/// The lease of a replica the suite lets die: it stops calling
/// [`heartbeat`](Coordinator::heartbeat) and the suite waits [`PAST_LEASE`] (over twice as
/// long, so that a backend's clock granularity cannot make an expiry look late). Under paused
/// tokio time both pass instantly.
const LEASE: Duration = Duration::from_millis(300);
const PAST_LEASE: Duration = Duration::from_millis(700);
/// The lease of the replicas that survive the whole suite, and the wait timeout that must not
/// run out.
const LONG: Duration = Duration::from_secs(60);
/// How long a turn that must come is awaited before the suite gives up.
const GRANT_WITHIN: Duration = Duration::from_secs(10);
/// How long a wait that must not be granted yet is watched.
const SETTLE: Duration = Duration::from_millis(50);
/// The timeout of a wait that must run out.
const SHORT_WAIT: Duration = Duration::from_millis(100);

/// Checks a [`Coordinator`] backend against the contract, panicking on the first difference.
///
/// The suite starts several replicas through `harness`, and simulates a replica's death by no
/// longer calling [`heartbeat`](Coordinator::heartbeat) on it and waiting past its lease
/// (300 ms). It runs under real time, and under paused tokio time
/// (`#[tokio::test(start_paused = true)]`) when the backend's clock is tokio's.
///
/// Keys, leadership names and replica ids are prefixed with a fresh id, so the suite can run
/// against a backend shared with other tests.
///
/// Covered: tickets granted in order with one holder at a time (also under racing replicas),
/// the turn that comes with an uncontended ticket, release and cancel, independent keys, turn
/// wait timeouts, lease expiry of turns and queued tickets, heartbeats renewing what a replica
/// holds, previous holders, fences, leadership, incarnations, and the status documents and
/// cluster view an operator reads.
pub async fn coordinator_conformance(harness: &impl CoordinatorHarness) {
    let s = Suite { h: harness, p: format!("conf-{}", uuid::Uuid::new_v4().simple()) };
    uncontended(&s).await;
    in_order(&s).await;
    racing_replicas(&s).await;
    independent_keys(&s).await;
    wait_timeout(&s).await;
    cancel(&s).await;
    lease_expiry(&s).await;
    heartbeat_renews(&s).await;
    previous_holder(&s).await;
    fences(&s).await;
    leadership(&s).await;
    incarnations(&s).await;
    cluster_view(&s).await;
}

struct Suite<'h, H> {
    h: &'h H,
    p: String,
}

impl<H: CoordinatorHarness> Suite<'_, H> {
    fn key(&self, name: &str) -> ChatKey {
        ChatKey::from(format!("{}:{name}", self.p))
    }

    fn lead(&self, name: &str) -> String {
        format!("{}:{name}", self.p)
    }

    /// A replica that heartbeats once for [`LONG`]: it stays alive through the suite.
    async fn live(&self, id: &str) -> Arc<dyn Coordinator> {
        let c = self.h.replica(&format!("{}-{id}", self.p)).await;
        c.heartbeat(LONG).await.unwrap();
        c
    }

    /// A replica that will die: alive for now, it dies [`LEASE`] after [`last_heartbeat`].
    /// (Alive for [`LONG`] until then, so that a loaded machine cannot let it die early.)
    async fn mortal(&self, id: &str) -> Arc<dyn Coordinator> {
        self.live(id).await
    }
}

/// Heartbeats `c` for the last time: it dies [`LEASE`] from now.
async fn last_heartbeat(c: &Arc<dyn Coordinator>) {
    c.heartbeat(LEASE).await.unwrap();
}

fn spawn_wait(c: &Arc<dyn Coordinator>, t: &Ticket) -> JoinHandle<Result<TurnGrant>> {
    let (c, t) = (Arc::clone(c), t.clone());
    tokio::spawn(async move { c.wait_turn(&t, LONG).await })
}

/// The grant a spawned wait must get.
async fn granted(task: JoinHandle<Result<TurnGrant>>, what: &str) -> TurnGrant {
    tokio::time::timeout(GRANT_WITHIN, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: the turn did not come"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Asserts that a spawned wait is still waiting a little later.
async fn still_waiting(task: &JoinHandle<Result<TurnGrant>>, what: &str) {
    tokio::time::sleep(SETTLE).await;
    assert!(!task.is_finished(), "{what}");
}

async fn uncontended<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let key = s.key("uncontended");
    let t = a.take_ticket(&key).await.unwrap();
    assert_eq!(t.key, key);
    let g = t.grant.clone().expect("an uncontended ticket comes with its turn");
    assert_eq!((g.key.as_str(), g.seq), (key.as_str(), t.seq), "the grant names its ticket");
    assert_eq!(g.previous_holder, None, "a new chat has no previous holder");
    assert_eq!(
        a.wait_turn(&t, LONG).await.unwrap(),
        g,
        "waiting on a ticket that came with its turn returns that turn"
    );
    assert!(a.release_turn(&g).await.unwrap());
    assert!(!a.release_turn(&g).await.unwrap(), "a turn is released once");
    let t2 = a.take_ticket(&key).await.unwrap();
    assert!(t2.seq > t.seq, "ticket numbers grow");
    let g2 = t2.grant.clone().expect("a released chat grants the next ticket at once");
    assert!(g2.fence > g.fence);
    assert!(a.release_turn(&g2).await.unwrap());
}

/// Three tickets of one chat from two replicas get their turns in order, one at a time, also
/// when a later ticket starts waiting first.
async fn in_order<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let key = s.key("order");
    let t1 = a.take_ticket(&key).await.unwrap();
    let g1 = t1.grant.clone().expect("the first ticket comes with its turn");
    let t2 = b.take_ticket(&key).await.unwrap();
    let t3 = a.take_ticket(&key).await.unwrap();
    assert!(t1.seq < t2.seq && t2.seq < t3.seq, "tickets are numbered in the order taken");
    assert_eq!(t2.grant, None, "a held chat grants no turn with the ticket");
    assert_eq!(t3.grant, None);

    let w3 = spawn_wait(&a, &t3);
    still_waiting(&w3, "the third ticket waits while the first holds the turn").await;
    assert!(a.release_turn(&g1).await.unwrap());
    let probe = a.take_ticket(&key).await.unwrap();
    assert_eq!(probe.grant, None, "a ticket taken while earlier ones wait does not jump them");
    a.cancel_ticket(&probe).await.unwrap();
    still_waiting(&w3, "the third ticket waits for the second, even though it asked first").await;

    let w2 = spawn_wait(&b, &t2);
    let g2 = granted(w2, "the second ticket after the first was released").await;
    assert_eq!(g2.seq, t2.seq);
    assert!(g2.fence > g1.fence, "fences grow with every grant");
    assert_eq!(g2.previous_holder.as_deref(), Some(a.replica_id()));
    still_waiting(&w3, "the third ticket waits while the second holds the turn").await;
    assert!(b.release_turn(&g2).await.unwrap());
    let g3 = granted(w3, "the third ticket after the second was released").await;
    assert_eq!(g3.seq, t3.seq);
    assert!(g3.fence > g2.fence);
    assert_eq!(g3.previous_holder.as_deref(), Some(b.replica_id()));
    assert!(a.release_turn(&g3).await.unwrap());
}

/// Replicas racing for one chat: every ticket gets its turn, in ticket order, one at a time.
async fn racing_replicas<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    const PER_REPLICA: usize = 5;
    let key = s.key("race");
    let holding = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for id in ["a", "b", "c"] {
        let c = s.live(id).await;
        for _ in 0..PER_REPLICA {
            let (c, key, holding, log) =
                (Arc::clone(&c), key.clone(), Arc::clone(&holding), Arc::clone(&log));
            tasks.push(tokio::spawn(async move {
                let t = c.take_ticket(&key).await.unwrap();
                let g = c.wait_turn(&t, LONG).await.unwrap();
                assert!(!holding.swap(true, Ordering::SeqCst), "two replicas held one chat");
                log.lock().unwrap().push((g.seq, g.fence));
                tokio::time::sleep(Duration::from_millis(1)).await;
                holding.store(false, Ordering::SeqCst);
                assert!(c.release_turn(&g).await.unwrap());
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(GRANT_WITHIN * 3, t)
            .await
            .expect("a racing ticket got no turn")
            .unwrap();
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 3 * PER_REPLICA);
    assert!(log.windows(2).all(|w| w[0].0 < w[1].0), "turns follow ticket order: {log:?}");
    assert!(log.windows(2).all(|w| w[0].1 < w[1].1), "fences grow with every grant: {log:?}");
}

async fn independent_keys<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let g1 = a.take_ticket(&s.key("one")).await.unwrap().grant.expect("a free chat is granted");
    let g2 = b
        .take_ticket(&s.key("two"))
        .await
        .unwrap()
        .grant
        .expect("another chat is granted while the first is held");
    let g3 = a
        .take_ticket(&s.key("three"))
        .await
        .unwrap()
        .grant
        .expect("a replica holds several chats at once");
    for (c, g) in [(&a, g1), (&b, g2), (&a, g3)] {
        assert!(c.release_turn(&g).await.unwrap());
    }
}

async fn wait_timeout<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let key = s.key("timeout");
    let g1 = a.take_ticket(&key).await.unwrap().grant.unwrap();
    let t2 = b.take_ticket(&key).await.unwrap();
    let e = b.wait_turn(&t2, SHORT_WAIT).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CoordinationUnavailable, "a turn wait times out: {e}");
    let t3 = a.take_ticket(&key).await.unwrap();
    assert_eq!(t3.grant, None, "the first ticket still holds the turn");
    let w3 = spawn_wait(&a, &t3);
    still_waiting(&w3, "the third ticket waits for the first").await;
    assert!(a.release_turn(&g1).await.unwrap());
    let g3 = granted(w3, "a timed-out wait withdraws its ticket").await;
    assert_eq!(g3.seq, t3.seq);
    b.cancel_ticket(&t2).await.unwrap(); // cancelling a timed-out ticket too is harmless
    assert!(a.release_turn(&g3).await.unwrap());
}

async fn cancel<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let key = s.key("cancel");
    let g1 = a.take_ticket(&key).await.unwrap().grant.unwrap();
    let t2 = b.take_ticket(&key).await.unwrap();
    let t3 = a.take_ticket(&key).await.unwrap();
    b.cancel_ticket(&t2).await.unwrap();
    b.cancel_ticket(&t2).await.unwrap(); // withdrawing twice is harmless
    let w3 = spawn_wait(&a, &t3);
    assert!(a.release_turn(&g1).await.unwrap());
    let g3 = granted(w3, "a cancelled ticket is skipped").await;
    assert_eq!(g3.previous_holder.as_deref(), Some(a.replica_id()));

    let t4 = b.take_ticket(&key).await.unwrap();
    assert_eq!(t4.grant, None);
    a.cancel_ticket(&t3).await.unwrap();
    let g4 = b.wait_turn(&t4, LONG).await.expect("cancelling a granted ticket releases its turn");
    assert!(!a.release_turn(&g3).await.unwrap(), "a cancelled turn is no longer held");
    assert!(b.release_turn(&g4).await.unwrap());

    let t5 = a.take_ticket(&key).await.unwrap();
    assert!(t5.grant.is_some());
    a.cancel_ticket(&t5).await.unwrap();
    let t6 = b.take_ticket(&key).await.unwrap();
    let g6 = t6.grant.expect("a ticket cancelled with its turn leaves the chat free");
    assert!(b.release_turn(&g6).await.unwrap());

    // A ticket withdrawn once granted, before anything ran under its turn (its wait gave up,
    // its replica stalled): nobody took over what its grant passed over, so the next grant
    // names it again.
    let c = s.live("c").await;
    let g7 = a.take_ticket(&key).await.unwrap().grant.unwrap();
    let t8 = b.take_ticket(&key).await.unwrap();
    let t9 = c.take_ticket(&key).await.unwrap();
    assert!(a.release_turn_with(&g7, &ReleaseOptions::used().handing_back()).await.unwrap());
    let g8 = b.wait_turn(&t8, LONG).await.unwrap();
    assert_eq!(g8.passed_over, [a.incarnation()], "a handed its work back");
    b.cancel_ticket(&t8).await.unwrap();
    let g9 = c.wait_turn(&t9, LONG).await.unwrap();
    assert!(
        g9.passed_over.iter().any(|i| i == a.incarnation()),
        "still to be taken over: {:?}",
        g9.passed_over
    );
    assert!(c.release_turn(&g9).await.unwrap());
}

/// A replica that stops heartbeating loses its turns after its lease, and its queued tickets
/// are skipped.
async fn lease_expiry<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let d = s.mortal("dying").await;
    let a = s.live("a").await;
    let held = s.key("expiry-held");
    let queued = s.key("expiry-queued");
    let gd = d.take_ticket(&held).await.unwrap().grant.unwrap();
    let ta = a.take_ticket(&held).await.unwrap();
    assert_eq!(ta.grant, None);
    let ga = a.take_ticket(&queued).await.unwrap().grant.unwrap();
    let td = d.take_ticket(&queued).await.unwrap();
    let ta2 = a.take_ticket(&queued).await.unwrap();
    assert!(td.seq < ta2.seq);

    assert!(a.is_alive(d.incarnation()).await.unwrap(), "a replica within its lease is alive");
    let wa = spawn_wait(&a, &ta);
    still_waiting(&wa, "a live holder keeps its turn").await;
    last_heartbeat(&d).await;
    tokio::time::sleep(PAST_LEASE).await;
    assert!(!a.is_alive(d.incarnation()).await.unwrap(), "and dead past it");
    assert!(!a.is_alive("never-seen").await.unwrap(), "an unknown incarnation is not alive");
    let g = granted(wa, "the turn of a replica past its lease is taken back").await;
    assert!(g.fence > gd.fence);
    assert_eq!(g.previous_holder.as_deref(), Some(d.replica_id()));
    assert!(!d.release_turn(&gd).await.unwrap(), "an expired turn is no longer held");
    assert!(a.release_turn(&g).await.unwrap());

    assert!(a.release_turn(&ga).await.unwrap());
    let g2 = a
        .wait_turn(&ta2, GRANT_WITHIN)
        .await
        .expect("the queued ticket of a replica past its lease is skipped");
    assert_eq!(g2.seq, ta2.seq);
    assert!(a.release_turn(&g2).await.unwrap());
}

/// A heartbeat renews every turn and leadership its replica holds.
async fn heartbeat_renews<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    // Longer than the suite's lease: every gap between two heartbeats must stay under it.
    const RENEWED: Duration = Duration::from_secs(2);
    let d = s.mortal("renewing").await;
    d.heartbeat(RENEWED).await.unwrap();
    let a = s.live("a").await;
    let key = s.key("renew");
    let name = s.lead("renew-lead");
    let gd = d.take_ticket(&key).await.unwrap().grant.unwrap();
    let ld = d.try_lead(&name, RENEWED).await.unwrap().unwrap();
    // Renew every third of the lease, as the runtime does, for longer than one lease.
    for _ in 0..4 {
        tokio::time::sleep(RENEWED / 3).await;
        d.heartbeat(RENEWED).await.unwrap();
    }
    let ta = a.take_ticket(&key).await.unwrap();
    assert_eq!(ta.grant, None, "a heartbeat renews the turns its replica holds");
    assert_eq!(
        a.try_lead(&name, LONG).await.unwrap(),
        None,
        "a heartbeat renews the leaderships its replica holds"
    );
    assert_eq!(d.try_lead(&name, RENEWED).await.unwrap(), Some(ld.clone()));
    assert!(d.release_turn(&gd).await.unwrap());
    assert!(d.resign(&ld).await.unwrap());
    let ga = a.wait_turn(&ta, GRANT_WITHIN).await.unwrap();
    assert!(a.release_turn(&ga).await.unwrap());
}

async fn previous_holder<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let key = s.key("previous");
    let mut expected: Option<&str> = None;
    for c in [&a, &a, &b, &a, &b, &b] {
        let g = c.take_ticket(&key).await.unwrap().grant.unwrap();
        assert_eq!(
            g.previous_holder.as_deref(),
            expected,
            "a grant names the replica that held the turn before"
        );
        assert!(c.release_turn(&g).await.unwrap());
        expected = Some(c.replica_id());
    }
    // A turn given back unused leaves the previous holder in place for the next one.
    let g = a.take_ticket(&key).await.unwrap().grant.unwrap();
    assert_eq!(g.previous_holder.as_deref(), Some(b.replica_id()));
    assert!(a.release_turn_with(&g, &ReleaseOptions::unused()).await.unwrap());
    let g = b.take_ticket(&key).await.unwrap().grant.unwrap();
    assert_eq!(
        g.previous_holder.as_deref(),
        Some(b.replica_id()),
        "an unused turn does not count as holding the chat"
    );
    assert!(b.release_turn(&g).await.unwrap());
}

/// Fences grow per key with every grant, whoever gets it, also when other keys and
/// leaderships draw fences in between.
async fn fences<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let key = s.key("fences");
    let other = s.key("fences-other");
    let name = s.lead("fences-lead");
    let mut last = 0;
    for (i, c) in [&a, &b, &b, &a, &b, &a].into_iter().enumerate() {
        let g = c.take_ticket(&key).await.unwrap().grant.unwrap();
        assert!(g.fence > last, "the fence of a chat grows with every grant");
        last = g.fence;
        assert!(c.release_turn(&g).await.unwrap());
        if i % 2 == 0 {
            let go = c.take_ticket(&other).await.unwrap().grant.unwrap();
            assert!(c.release_turn(&go).await.unwrap());
        } else {
            let l = c.try_lead(&name, LONG).await.unwrap().unwrap();
            assert!(c.resign(&l).await.unwrap());
        }
    }
}

async fn leadership<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("a").await;
    let b = s.live("b").await;
    let name = s.lead("lead");
    let la = a.try_lead(&name, LONG).await.unwrap().expect("a free leadership is granted");
    assert_eq!(la.name, name);
    assert_eq!(b.try_lead(&name, LONG).await.unwrap(), None, "there is one leader");
    assert_eq!(
        a.try_lead(&name, LONG).await.unwrap(),
        Some(la.clone()),
        "the leader renews with the same fence"
    );
    assert!(!b.resign(&la).await.unwrap(), "only the leader can resign");
    assert_eq!(b.try_lead(&name, LONG).await.unwrap(), None);
    assert!(a.resign(&la).await.unwrap());
    assert!(!a.resign(&la).await.unwrap(), "a leadership is resigned once");
    let lb = b.try_lead(&name, LONG).await.unwrap().expect("a resigned leadership is granted");
    assert!(lb.fence > la.fence, "the fence grows with every change of leader");
    assert!(!a.resign(&la).await.unwrap(), "a former leader cannot resign the new one");
    assert_eq!(a.try_lead(&name, LONG).await.unwrap(), None);
    assert!(b.resign(&lb).await.unwrap());

    let d = s.mortal("dying-leader").await;
    let name = s.lead("lead-dead");
    let ld = d.try_lead(&name, LEASE).await.unwrap().expect("a free leadership is granted");
    assert_eq!(a.try_lead(&name, LONG).await.unwrap(), None);
    last_heartbeat(&d).await;
    tokio::time::sleep(PAST_LEASE).await;
    let la = a.try_lead(&name, LONG).await.unwrap().expect("a dead leader is replaced");
    assert!(la.fence > ld.fence);
    assert!(!d.resign(&ld).await.unwrap(), "a dead leader cannot resign its successor");
    assert_eq!(a.try_lead(&name, LONG).await.unwrap(), Some(la.clone()));
    assert!(a.resign(&la).await.unwrap());
}

/// Coordinators with the same replica id are different incarnations: they share nothing.
async fn incarnations<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a1 = s.mortal("same").await;
    let a2 = s.live("same").await;
    assert_eq!(a1.replica_id(), a2.replica_id());
    assert_ne!(a1.incarnation(), a2.incarnation(), "every coordinator is a new incarnation");

    let key = s.key("incarnation");
    let t1 = a1.take_ticket(&key).await.unwrap();
    let g1 = t1.grant.clone().unwrap();
    let t2 = a2.take_ticket(&key).await.unwrap();
    assert_eq!(t2.grant, None, "another incarnation of the same replica does not share a turn");
    assert!(!a2.release_turn(&g1).await.unwrap(), "nor can it release the turn");
    a2.cancel_ticket(&t1).await.unwrap();
    let name = s.lead("incarnation-lead");
    let l1 = a1.try_lead(&name, LEASE).await.unwrap().unwrap();
    assert_eq!(a2.try_lead(&name, LONG).await.unwrap(), None, "nor a leadership");
    assert!(!a2.resign(&l1).await.unwrap());

    let w2 = spawn_wait(&a2, &t2);
    still_waiting(&w2, "a cancel by another incarnation does not release the turn").await;
    // a1 dies; a2 is the replica restarted with its id.
    last_heartbeat(&a1).await;
    tokio::time::sleep(PAST_LEASE).await;
    let g2 = granted(w2, "a restarted replica takes over once the old incarnation's lease ran out")
        .await;
    assert!(g2.fence > g1.fence);
    let l2 = a2.try_lead(&name, LONG).await.unwrap().expect("and its leaderships");
    assert!(l2.fence > l1.fence);
    assert!(a2.release_turn(&g2).await.unwrap());
    assert!(a2.resign(&l2).await.unwrap());
}

/// Status documents and the cluster view: a published document is listed with its replica and
/// liveness, replaced by the next publish and forgotten when its keep runs out; a leadership
/// lists its holder and fence, alive or not; reading the view changes nothing.
async fn cluster_view<H: CoordinatorHarness>(s: &Suite<'_, H>) {
    let a = s.live("status-a").await;
    let d = s.mortal("status-dying").await;
    let name = s.lead("provider:x");
    let never = s.lead("provider:never-led");
    let names = [name.clone(), never.clone()];

    // A replica that never heartbeats, only reads: the read registers nothing.
    let reader = s.h.replica(&format!("{}-status-reader", s.p)).await;
    let empty = reader.cluster(&names).await.unwrap();
    assert!(empty.replica(a.incarnation()).is_none(), "nothing is listed before a publish");
    assert!(empty.leaders.is_empty(), "a name never led has no leader");
    assert!(!a.is_alive(reader.incarnation()).await.unwrap(), "reading the view changes nothing");

    d.publish_status(r#"{"v":"d1"}"#, LONG).await.unwrap();
    tokio::time::sleep(SETTLE).await;
    a.publish_status(r#"{"v":"a1"}"#, LONG).await.unwrap();
    let ld = d.try_lead(&name, LEASE).await.unwrap().expect("a free leadership is granted");
    let view = reader.cluster(&names).await.unwrap();
    let sorted = view
        .replicas
        .windows(2)
        .all(|w| (&w[0].replica_id, &w[0].incarnation) <= (&w[1].replica_id, &w[1].incarnation));
    assert!(sorted, "replicas are sorted by replica id, then incarnation: {view:?}");
    let ra = view.replica(a.incarnation()).expect("a published replica is listed");
    let rd = view.replica(d.incarnation()).expect("every published replica is listed");
    assert_eq!((ra.replica_id.as_str(), ra.status.as_str()), (a.replica_id(), r#"{"v":"a1"}"#));
    assert_eq!((rd.replica_id.as_str(), rd.status.as_str()), (d.replica_id(), r#"{"v":"d1"}"#));
    assert!(ra.alive && rd.alive, "replicas within their lease are alive");
    assert!(rd.age >= ra.age && rd.age < LONG, "the age counts from the last publish: {view:?}");
    assert_eq!(
        view.leaders,
        [LeaderEntry::new(&name, d.replica_id(), d.incarnation(), ld.fence, true)],
        "a held name lists its holder with its fence; a name never led is left out"
    );

    a.publish_status(r#"{"v":"a2"}"#, LONG).await.unwrap();
    let view = a.cluster(&names).await.unwrap();
    let mine: Vec<_> = view.replicas.iter().filter(|r| r.incarnation == a.incarnation()).collect();
    assert_eq!(mine.len(), 1, "an incarnation is listed once: {view:?}");
    assert_eq!(mine[0].status, r#"{"v":"a2"}"#, "a publish replaces the document");

    // d stops heartbeating; a's document is published again with a short keep.
    last_heartbeat(&d).await;
    a.publish_status(r#"{"v":"a3"}"#, LEASE).await.unwrap();
    tokio::time::sleep(PAST_LEASE).await;
    let view = reader.cluster(&names).await.unwrap();
    assert!(view.replica(a.incarnation()).is_none(), "a document is forgotten after its keep");
    let rd = view.replica(d.incarnation()).expect("a dead replica is listed until its keep ends");
    assert!(!rd.alive, "a replica past its lease is listed dead");
    assert_eq!(rd.status, r#"{"v":"d1"}"#);
    assert_eq!(
        view.leaders,
        [LeaderEntry::new(&name, d.replica_id(), d.incarnation(), ld.fence, false)],
        "a dead holder keeps the name, listed dead"
    );

    let la = a.try_lead(&name, LONG).await.unwrap().expect("a dead leader is replaced");
    let view = reader.cluster(&names).await.unwrap();
    assert_eq!(
        view.leaders,
        [LeaderEntry::new(&name, a.replica_id(), a.incarnation(), la.fence, true)],
        "the new holder is listed once it took the name"
    );
    assert!(a.resign(&la).await.unwrap());
    assert!(reader.cluster(&names).await.unwrap().leaders.is_empty(), "a resigned name is free");
}
