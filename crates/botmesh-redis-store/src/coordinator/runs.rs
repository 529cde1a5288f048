//! Runs of a chat's own tickets: when the ticket right after the one whose turn ends is this
//! incarnation's too, nothing can come between them (ticket numbers are consecutive), so the
//! turn passes to it here, without a round trip. Redis goes on recording the run's first
//! ticket as the holder; the release that ends the run names that ticket and the last one,
//! and drops the run's tickets from the queue.
//!
//! A run is at most [`MAX_RUN`] tickets long, so the release that ends it has a bounded number
//! of tickets to drop.
//!
//! A turn passes here only while this incarnation's liveness key is known to be alive: the
//! last heartbeat renewed it less than half a lease ago, and none found it expired since the
//! run began (which forgets every run). Otherwise the release goes to Redis, which checks.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use botmesh_traits::{ChatKey, ReleaseOptions, TurnGrant};
use tokio::time::Instant;

use super::lock;

/// The most tickets in one run: its last release drops the others from the queue, and the next
/// ticket, if ours, starts the next run.
pub(super) const MAX_RUN: u64 = 32;

/// One chat's own tickets and run.
#[derive(Default)]
struct Chat {
    /// Tickets taken without their turn, not yet granted nor withdrawn.
    waiting: BTreeSet<u64>,
    /// The ticket whose turn this incarnation holds (a grant another incarnation releases
    /// is not ours to pass on).
    holding: Option<u64>,
    /// The ticket Redis records as the holder, while a later ticket of the run holds the
    /// turn here.
    first: Option<u64>,
}

impl Chat {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.holding.is_none() && self.first.is_none()
    }
}

/// This incarnation's tickets and runs, by chat.
#[derive(Default)]
pub(super) struct Runs {
    chats: Mutex<HashMap<ChatKey, Chat>>,
    /// When the last heartbeat that found the liveness key alive started.
    renewed_at: Mutex<Option<Instant>>,
}

/// What a release of a turn does.
pub(super) enum Release {
    /// The turn passed to the next ticket, which is ours: this grant.
    Passed(TurnGrant),
    /// Redis releases the turn Redis records for ticket `held`, the run through `through`.
    Redis { held: u64, through: u64 },
}

impl Runs {
    /// Notes tickets taken without their turn.
    pub(super) fn taken(&self, key: &ChatKey, seqs: impl IntoIterator<Item = u64>) {
        let mut seqs = seqs.into_iter().peekable();
        if seqs.peek().is_some() {
            lock(&self.chats).entry(key.clone()).or_default().waiting.extend(seqs);
        }
    }

    /// The turn of ticket `seq` is ours, granted with the ticket or after its wait. Unless
    /// it passed here, Redis granted it: Redis records it as the holder, a run starts anew.
    pub(super) fn holds(&self, key: &ChatKey, seq: u64) {
        let mut chats = lock(&self.chats);
        let chat = chats.entry(key.clone()).or_default();
        chat.waiting.remove(&seq);
        if chat.holding != Some(seq) {
            chat.holding = Some(seq);
            chat.first = None;
        }
    }

    /// A ticket's wait ended without its turn: it is no longer waiting.
    pub(super) fn ended(&self, key: &ChatKey, seq: u64) {
        let mut chats = lock(&self.chats);
        if let Some(chat) = chats.get_mut(key) {
            chat.waiting.remove(&seq);
            if chat.idle() {
                chats.remove(key);
            }
        }
    }

    /// Decides how `grant`'s turn is given back: passed here to our next ticket when it is
    /// the very next one and nothing else has to reach Redis, else released there.
    /// `may_pass` is `false` when the release must reach Redis anyway (it carries a write of
    /// its own).
    pub(super) fn release(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        replica_id: &str,
        lease: Duration,
        may_pass: bool,
    ) -> Release {
        let mut chats = lock(&self.chats);
        let alone = Release::Redis { held: grant.seq, through: grant.seq };
        let Some(chat) = chats.get_mut(&grant.key) else { return alone };
        if chat.holding != Some(grant.seq) {
            // Not the turn we hold (an old grant, or another incarnation's).
            return alone;
        }
        let next = grant.seq + 1;
        let first = chat.first.unwrap_or(grant.seq);
        if may_pass && Self::goes_on(chat, grant, options) && self.alive(lease) {
            chat.waiting.remove(&next);
            chat.first = Some(first);
            chat.holding = Some(next);
            let passed = TurnGrant::new(grant.key.clone(), next, next, Some(replica_id.to_owned()));
            return Release::Passed(passed);
        }
        Release::Redis { held: first, through: grant.seq }
    }

    /// Whether [`release`](Self::release) would pass `grant`'s turn here now.
    pub(super) fn would_pass(
        &self,
        grant: &TurnGrant,
        options: &ReleaseOptions,
        lease: Duration,
    ) -> bool {
        let chats = lock(&self.chats);
        chats.get(&grant.key).is_some_and(|chat| {
            chat.holding == Some(grant.seq) && Self::goes_on(chat, grant, options)
        }) && self.alive(lease)
    }

    /// Whether the run holding `grant`'s turn goes on to our next ticket: the turn was used,
    /// is not handed back, the run is not at its longest, and the next ticket waits here.
    fn goes_on(chat: &Chat, grant: &TurnGrant, options: &ReleaseOptions) -> bool {
        let next = grant.seq + 1;
        let first = chat.first.unwrap_or(grant.seq);
        options.used && !options.hand_back && next - first < MAX_RUN && chat.waiting.contains(&next)
    }

    /// Redis answered the release of the turn or run through `through`: when that was the
    /// turn we hold, the run is over.
    pub(super) fn released(&self, key: &ChatKey, through: u64) {
        let mut chats = lock(&self.chats);
        if let Some(chat) = chats.get_mut(key)
            && chat.holding == Some(through)
        {
            chat.first = None;
            chat.holding = None;
            chat.waiting.retain(|&seq| seq > through);
            if chat.idle() {
                chats.remove(key);
            }
        }
    }

    /// A ticket is withdrawn. When the turn had passed to it here (and it never picked it
    /// up: `unclaimed` takes the grant back), the run must be released in Redis: returns the
    /// ticket Redis records as the holder.
    pub(super) fn withdrawn(
        &self,
        key: &ChatKey,
        seq: u64,
        unclaimed: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let mut chats = lock(&self.chats);
        let chat = chats.get_mut(key)?;
        if chat.waiting.remove(&seq) {
            if chat.idle() {
                chats.remove(key);
            }
            return None;
        }
        chat.first.filter(|_| chat.holding == Some(seq) && unclaimed())
    }

    /// Whether ticket `seq` of `key` is one this incarnation waits for or holds the turn
    /// with, or one of the run holding the turn here (Redis records its first ticket as the
    /// holder, and keeps the others queued until the run ends).
    pub(super) fn knows(&self, key: &ChatKey, seq: u64) -> bool {
        lock(&self.chats).get(key).is_some_and(|chat| {
            chat.waiting.contains(&seq)
                || chat.holding == Some(seq)
                || chat
                    .first
                    .zip(chat.holding)
                    .is_some_and(|(first, last)| (first..=last).contains(&seq))
        })
    }

    /// A heartbeat that started at `started` found the liveness key alive.
    pub(super) fn renewed(&self, started: Instant) {
        *lock(&self.renewed_at) = Some(started);
    }

    /// A heartbeat found the liveness key expired: other replicas may have taken our turns
    /// and skipped our tickets. Every run and waiting ticket is forgotten here (their
    /// releases and waits go to Redis, which knows).
    pub(super) fn expired(&self) {
        *lock(&self.renewed_at) = None;
        lock(&self.chats).clear();
    }

    /// Whether the liveness key is known to be alive, with half a lease to spare.
    fn alive(&self, lease: Duration) -> bool {
        lock(&self.renewed_at).is_some_and(|at| at.elapsed() < lease / 2)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use botmesh_traits::{ChatKey, ReleaseOptions, TurnGrant};
    use tokio::time::Instant;

    use super::{MAX_RUN, Release, Runs};

    const LEASE: Duration = Duration::from_secs(3);

    fn grant(seq: u64) -> TurnGrant {
        TurnGrant::new(ChatKey::from("c"), seq, seq, None)
    }

    fn passes(release: Release) -> Option<u64> {
        match release {
            Release::Passed(g) => Some(g.seq),
            Release::Redis { .. } => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_turn_passes_here_only_to_the_very_next_ticket_while_the_lease_is_fresh() {
        let runs = Runs::default();
        let key = ChatKey::from("c");
        runs.taken(&key, [11, 13]);
        runs.holds(&key, 10);
        // Never renewed: Redis decides.
        assert_eq!(
            passes(runs.release(&grant(10), &ReleaseOptions::used(), "a", LEASE, true)),
            None
        );
        runs.renewed(Instant::now());
        assert!(runs.would_pass(&grant(10), &ReleaseOptions::used(), LEASE));
        // A release with a write of its own goes to Redis, and the run waits for it there.
        assert!(matches!(
            runs.release(&grant(10), &ReleaseOptions::used(), "a", LEASE, false),
            Release::Redis { held: 10, through: 10 }
        ));
        assert!(runs.would_pass(&grant(10), &ReleaseOptions::used(), LEASE), "11 still waits");
        let passed = runs.release(&grant(10), &ReleaseOptions::used(), "a", LEASE, true);
        let Release::Passed(g) = passed else { panic!("11 is ours and next") };
        assert_eq!((g.seq, g.fence, g.previous_holder.as_deref()), (11, 11, Some("a")));
        assert!(g.passed_over.is_empty());
        // An old grant released again (a retry) goes to Redis alone and leaves the run be.
        assert!(matches!(
            runs.release(&grant(10), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Redis { held: 10, through: 10 }
        ));
        runs.released(&key, 10);
        // 12 is somebody else's: the run through 11 ends in Redis, which holds 10.
        let Release::Redis { held, through } =
            runs.release(&grant(11), &ReleaseOptions::used(), "a", LEASE, true)
        else {
            panic!("12 is not ours")
        };
        assert_eq!((held, through), (10, 11));
        runs.released(&key, 11);
        // Another incarnation's grant is not ours to pass on.
        assert!(!runs.would_pass(&grant(12), &ReleaseOptions::used(), LEASE));
        assert_eq!(
            passes(runs.release(&grant(12), &ReleaseOptions::used(), "a", LEASE, true)),
            None
        );
        runs.holds(&key, 13);
        // An unused turn or a hand-back goes to Redis; so does any release once the last
        // renewal is half a lease old.
        runs.taken(&key, [14]);
        assert_eq!(
            passes(runs.release(&grant(13), &ReleaseOptions::unused(), "a", LEASE, true)),
            None
        );
        let back = ReleaseOptions::used().handing_back();
        assert_eq!(passes(runs.release(&grant(13), &back, "a", LEASE, true)), None);
        tokio::time::advance(LEASE / 2).await;
        assert_eq!(
            passes(runs.release(&grant(13), &ReleaseOptions::used(), "a", LEASE, true)),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_redis_grants_while_a_run_s_release_is_on_the_wire_starts_a_run_of_its_own() {
        let runs = Runs::default();
        let key = ChatKey::from("c");
        runs.renewed(Instant::now());
        runs.taken(&key, [2]);
        runs.holds(&key, 1);
        assert_eq!(
            passes(runs.release(&grant(1), &ReleaseOptions::used(), "a", LEASE, true)),
            Some(2)
        );
        runs.holds(&key, 2);
        // The run through 2 goes to Redis; before it answers, a take finds the chat free and
        // comes back with the turn of 3, and 4 behind it.
        assert!(matches!(
            runs.release(&grant(2), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Redis { held: 1, through: 2 }
        ));
        runs.taken(&key, [4]);
        runs.holds(&key, 3);
        assert_eq!(
            passes(runs.release(&grant(3), &ReleaseOptions::used(), "a", LEASE, true)),
            Some(4)
        );
        // The old run's answer leaves the new one be.
        runs.released(&key, 2);
        runs.holds(&key, 4);
        assert!(matches!(
            runs.release(&grant(4), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Redis { held: 3, through: 4 }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_ends_in_redis_after_its_longest_length() {
        let runs = Runs::default();
        let key = ChatKey::from("c");
        runs.renewed(Instant::now());
        runs.taken(&key, 1..=MAX_RUN);
        runs.holds(&key, 0);
        for seq in 0..MAX_RUN - 1 {
            assert_eq!(
                passes(runs.release(&grant(seq), &ReleaseOptions::used(), "a", LEASE, true)),
                Some(seq + 1)
            );
        }
        assert!(matches!(
            runs.release(&grant(MAX_RUN - 1), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Redis { held: 0, through } if through == MAX_RUN - 1
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_withdrawn_ticket_the_turn_passed_to_releases_the_run_and_expiry_forgets_runs() {
        let runs = Runs::default();
        let key = ChatKey::from("c");
        runs.renewed(Instant::now());
        runs.taken(&key, [2, 3, 4]);
        runs.holds(&key, 1);
        // Withdrawn while still waiting: nothing to release.
        assert_eq!(runs.withdrawn(&key, 4, || unreachable!()), None);
        assert!(matches!(
            runs.release(&grant(1), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Passed(_)
        ));
        // The turn passed to 2; 2 withdrawn before it took it: release the run Redis holds.
        assert_eq!(runs.withdrawn(&key, 2, || true), Some(1));
        // Taken meanwhile: the holder releases it as usual.
        assert_eq!(runs.withdrawn(&key, 2, || false), None);
        runs.expired();
        assert!(matches!(
            runs.release(&grant(2), &ReleaseOptions::used(), "a", LEASE, true),
            Release::Redis { held: 2, through: 2 }
        ));
    }
}
