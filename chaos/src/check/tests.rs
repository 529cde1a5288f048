//! The checker's rules, each on a small history.

use super::*;
use crate::record::Record;

const MS: u64 = 1_000_000;

fn handled(chat: u32, seq: u32, replica: &str, fence: u64, t: u64) -> Record {
    Record::Handled { chat, seq, kind: "echo".into(), replica: replica.into(), fence, t }
}

fn sent(chat: u32, seq: u32, replica: &str, fence: u64, t: u64) -> Sent {
    Sent { chat, seq, kind: "echo".into(), fence, replica: replica.into(), t, key: None }
}

fn acked(chat: u32, seq: u32, replica: &str, t: u64) -> Acked {
    Acked { chat, seq, replica: replica.into(), t }
}

fn fault(kind: FaultKind, replica: Option<&str>, t: u64, t_end: u64) -> Fault {
    Fault {
        kind,
        replica: replica.map(Into::into),
        at_ms: 0,
        lasted_ms: 0,
        t,
        t_end,
        bursts: Vec::new(),
    }
}

fn clean() -> Run {
    Run {
        acked: vec![acked(1, 0, "a", 0), acked(1, 1, "b", 5 * MS)],
        history: vec![handled(1, 0, "a", 1, MS), handled(1, 1, "b", 2, 20 * MS)],
        sent: vec![sent(1, 0, "a", 1, 10 * MS), sent(1, 1, "b", 2, 30 * MS)],
        lease_ms: 1000,
        durability: true,
        ..Run::default()
    }
}

#[test]
fn a_clean_history_has_no_violation() {
    let report = clean().check();
    assert_eq!(report.violations(), 0, "{report:?}");
    assert_eq!((report.messages_sent, report.messages_handled, report.messages_replied), (2, 2, 2));
}

#[test]
fn a_reply_from_a_lower_fence_after_a_higher_one_started_is_an_overlap() {
    let mut run = clean();
    run.sent[0].t = 25 * MS;
    let report = run.check();
    assert_eq!(report.overlaps, 1);
}

#[test]
fn replies_in_the_wrong_order_are_an_order_violation() {
    let mut run = clean();
    run.history = vec![handled(1, 1, "b", 1, MS), handled(1, 0, "a", 2, 20 * MS)];
    run.sent = vec![sent(1, 1, "b", 1, 10 * MS), sent(1, 0, "a", 2, 30 * MS)];
    assert_eq!(run.check().order_violations, 1);
}

#[test]
fn an_unanswered_message_is_lost_and_a_second_reply_is_a_duplicate_send() {
    let mut run = clean();
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.sent.push(sent(1, 1, "b", 2, 31 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.duplicate_sends), (1, 1));
}

#[test]
fn without_durability_a_message_waiting_on_a_killed_replica_is_accounted_for() {
    let mut run = clean();
    run.durability = false;
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.faults.push(fault(FaultKind::Kill, Some("a"), 41 * MS, 42 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (0, 1));
    assert_eq!(report.accounted[0].fault, FaultKind::Kill);
}

#[test]
fn without_durability_a_message_overtaken_before_its_replica_died_is_lost() {
    let mut run = clean();
    run.durability = false;
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.acked.push(acked(1, 3, "b", 45 * MS));
    run.history.push(handled(1, 3, "b", 3, 46 * MS));
    run.sent.push(sent(1, 3, "b", 3, 50 * MS));
    run.faults.push(fault(FaultKind::Kill, Some("a"), 100 * MS, 101 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (1, 0), "{report:?}");
}

#[test]
fn without_durability_a_message_acknowledged_as_its_replica_froze_is_accounted_for() {
    let mut run = clean();
    run.durability = false;
    // The acknowledgement arrived 5 ms after the replica that sent it was stopped.
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.faults.push(fault(FaultKind::Stop, Some("a"), 35 * MS, 3035 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (0, 1), "{report:?}");
    assert_eq!(report.accounted[0].fault, FaultKind::Stop);
}

fn sending(chat: u32, seq: u32, replica: &str, fence: u64, t: u64) -> Record {
    Record::Sending { chat, seq, kind: "echo".into(), fence, replica: replica.into(), t }
}

/// `a`'s reply to message 0 reaches the platform after `b` answered message 1 under a
/// higher fence, `a` having been stopped from 12 ms to 3,012 ms; `a` let it go at `let_go`.
fn late_reply_of_a(let_go: u64) -> Run {
    let mut run = clean();
    run.sent[0].t = 3015 * MS;
    run.history.push(sending(1, 0, "a", 1, let_go));
    run.faults.push(fault(FaultKind::Stop, Some("a"), 12 * MS, 3012 * MS));
    run
}

#[test]
fn a_send_let_go_before_its_replica_froze_that_lands_after_is_counted_apart() {
    let report = late_reply_of_a(9 * MS).check();
    assert_eq!((report.overlaps, report.order_violations), (0, 0), "{report:?}");
    let o = &report.outside_guarantees;
    assert_eq!((o.overlaps, o.order_violations, o.sends_across_stops), (1, 1, 1));
}

#[test]
fn a_send_let_go_after_its_replica_resumed_is_a_violation() {
    let report = late_reply_of_a(3013 * MS).check();
    assert_eq!((report.overlaps, report.order_violations), (1, 1), "{report:?}");
    assert_eq!(report.outside_guarantees.sends_across_stops, 0);
}

#[test]
fn without_durability_a_message_taken_before_its_replica_froze_and_acknowledged_after_is_accounted_for()
 {
    let mut run = clean();
    run.durability = false;
    // The acknowledgement arrived after the stop ended, long past `IN_FLIGHT`.
    run.acked.push(acked(1, 2, "a", 3040 * MS));
    run.faults.push(fault(FaultKind::Stop, Some("a"), 35 * MS, 3035 * MS));
    let taken = |t| Record::Accepted { chat: 1, seq: 2, replica: "a".into(), t };

    run.history.push(taken(3037 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (1, 0), "taken after the stop: {report:?}");

    run.history.pop();
    run.history.push(taken(34 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (0, 1), "{report:?}");
    assert_eq!(report.accounted[0].fault, FaultKind::Stop);
}

#[test]
fn without_durability_a_message_ticketed_before_its_replica_froze_and_acknowledged_after_is_accounted_for()
 {
    let mut run = clean();
    run.durability = false;
    run.acked.push(acked(1, 2, "a", 3040 * MS));
    run.faults.push(fault(FaultKind::Stop, Some("a"), 35 * MS, 3035 * MS));
    let ticketed = |t| Record::Ticketed { chat: 1, replica: "a".into(), count: 1, t };
    // The verdict was written down only after the stop, but its ticket call returned before.
    run.history.push(Record::Accepted { chat: 1, seq: 2, replica: "a".into(), t: 3037 * MS });
    run.history.push(ticketed(34 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (0, 1), "{report:?}");
    assert_eq!(report.accounted[0].fault, FaultKind::Stop);

    // A ticket call for the chat after the stop: the message's own, taken after resuming.
    run.history.push(ticketed(3036 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.lost_allowed), (1, 0), "ticketed after the stop: {report:?}");
}

#[test]
fn a_message_overtaken_before_a_restart_of_redis_is_lost_not_wiped() {
    let mut run = clean();
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.acked.push(acked(1, 3, "b", 45 * MS));
    run.history.push(handled(1, 3, "b", 3, 46 * MS));
    run.sent.push(sent(1, 3, "b", 3, 50 * MS));
    run.faults.push(fault(FaultKind::Restart, None, 5000 * MS, 5001 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.outside_guarantees.lost), (1, 0), "{report:?}");
}

#[test]
fn a_checkpoint_written_after_a_higher_fence_started_is_stale() {
    let mut run = clean();
    run.history.push(Record::Grant {
        chat: 1,
        replica: "a".into(),
        fence: 1,
        passed: Vec::new(),
        t: 0,
    });
    run.history.push(Record::Checkpoint { chat: 1, replica: "a".into(), revision: 3, t: 21 * MS });
    assert_eq!(run.check().stale_writes, 1);
}

#[test]
fn what_a_wipe_of_redis_breaks_is_counted_apart() {
    let mut run = clean();
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.faults.push(fault(FaultKind::Restart, None, 50 * MS, 60 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.outside_guarantees.lost), (0, 1));
}

#[test]
fn a_kill_s_takeover_is_the_wait_until_its_chats_move() {
    let mut run = clean();
    run.acked.push(acked(1, 2, "a", 40 * MS));
    run.history.push(handled(1, 2, "b", 3, 1500 * MS));
    run.sent.push(sent(1, 2, "b", 3, 1550 * MS));
    run.faults.push(fault(FaultKind::Kill, Some("a"), 50 * MS, 60 * MS));
    assert_eq!(run.check().takeover_max_ms, 1500);
}

fn session(id: u64, replica: &str, opened: u64, closed: Option<u64>) -> Session {
    Session { id, replica: replica.into(), opened, closed }
}

fn polled(session: u64, replica: &str, start: u64, end: u64) -> Polled {
    Polled { session, replica: replica.into(), start, end }
}

/// a polls, stops and closes its session; b opens one after and polls.
fn handed_over() -> Run {
    Run {
        sessions: vec![session(1, "a", 0, Some(100 * MS)), session(2, "b", 200 * MS, None)],
        polls: vec![polled(1, "a", MS, 90 * MS), polled(2, "b", 210 * MS, 500 * MS)],
        lease_ms: 1000,
        durability: true,
        ..Run::default()
    }
}

#[test]
fn sessions_handed_over_one_after_the_other_do_not_overlap() {
    let report = handed_over().check();
    assert_eq!(report.transport_overlaps, 0, "{report:?}");
    assert_eq!(report.polling_sessions, 2);
}

#[test]
fn a_poll_of_a_superseded_session_is_a_transport_overlap() {
    let mut run = handed_over();
    // a woke up and polled once more after b's session opened.
    run.polls.push(polled(1, "a", 300 * MS, 310 * MS));
    let report = run.check();
    assert_eq!(report.transport_overlaps, 1);
    assert_eq!(report.violations(), 1);
}

#[test]
fn a_poll_still_in_flight_when_another_session_opened_is_an_overlap() {
    let mut run = handed_over();
    run.polls[0].end = 250 * MS;
    assert_eq!(run.check().transport_overlaps, 1);
}

#[test]
fn a_poll_let_go_before_its_replica_was_stopped_is_counted_apart() {
    let mut run = handed_over();
    run.polls.push(polled(1, "a", 300 * MS, 310 * MS));
    run.history.push(Record::Polling { session: 1, replica: "a".into(), t: 95 * MS });
    run.faults.push(fault(FaultKind::Stop, Some("a"), 96 * MS, 290 * MS));
    let report = run.check();
    assert_eq!(report.transport_overlaps, 0);
    assert_eq!(report.outside_guarantees.polls_across_stops, 1);
}

#[test]
fn a_starve_excuses_only_what_was_let_go_before_one_of_its_bursts() {
    let mut run = clean();
    run.history.push(sending(1, 0, "a", 1, 5 * MS));
    let mut starve = fault(FaultKind::Starve, Some("a"), 2 * MS, 40 * MS);
    starve.bursts = vec![(2 * MS, 3 * MS), (8 * MS, 9 * MS)];
    run.faults.push(starve);
    // Let go at 5 ms, after the first burst; a burst at 8 ms, then the platform got it.
    run.sent[0].t = 25 * MS;
    let report = run.check();
    assert_eq!((report.overlaps, report.outside_guarantees.overlaps), (0, 1), "{report:?}");
    // With no burst between its let-go and its arrival, nothing excuses it.
    run.faults[0].bursts = vec![(2 * MS, 3 * MS)];
    let report = run.check();
    assert_eq!((report.overlaps, report.outside_guarantees.overlaps), (1, 0), "{report:?}");
}

#[test]
fn a_transport_takeover_is_timed_from_the_kill_of_the_polling_replica() {
    let mut run = handed_over();
    run.sessions[0].closed = None;
    run.faults.push(fault(FaultKind::Kill, Some("a"), 100 * MS, 150 * MS));
    let report = run.check();
    assert_eq!(report.transport_takeovers_ms, [110]);
    assert_eq!(report.transport_takeover_max_ms, 110);
}

fn grant(chat: u32, replica: &str, fence: u64, t: u64) -> Record {
    Record::Grant { chat, replica: replica.into(), fence, passed: Vec::new(), t }
}

#[test]
fn a_fence_granted_again_is_a_double_grant_and_outside_the_guarantees_across_a_lossy_failover() {
    let mut run = clean();
    run.history = vec![grant(1, "a", 7, MS), grant(1, "b", 8, 20 * MS), grant(1, "c", 8, 40 * MS)];
    assert_eq!(run.check().double_grants, 1);
    // A grant written down late (its replica froze while the call was out) is no double grant.
    run.history.push(grant(1, "c", 6, 50 * MS));
    assert_eq!(run.check().double_grants, 1);
    // Next to a failover, it is what Redis cannot promise without WAIT.
    run.faults.push(fault(FaultKind::Failover, None, 35 * MS, 36 * MS));
    let report = run.check();
    assert_eq!((report.double_grants, report.outside_guarantees.double_grants), (0, 1));
    // With grants waiting for the replica, a failover is inside the guarantees.
    run.wait_replicas = true;
    assert_eq!(run.check().double_grants, 1);
}

#[test]
fn a_message_a_wipe_found_still_waiting_is_put_down_to_the_wipe_with_how_long_it_waited() {
    let mut run = clean();
    run.acked.push(acked(1, 2, "a", 40 * MS));
    // Its replica was killed first; the journal that held it was wiped 20 s later.
    run.faults.push(fault(FaultKind::Kill, Some("a"), 50 * MS, 60 * MS));
    run.faults.push(fault(FaultKind::Restart, None, 20_040 * MS, 20_041 * MS));
    let report = run.check();
    assert_eq!((report.lost, report.outside_guarantees.lost), (0, 1), "{report:?}");
    assert_eq!(report.wiped[0].waited_ms, 20_000);
}
