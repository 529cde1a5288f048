//! The checker's rules, each on a small history.

use super::*;

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
    Fault { kind, replica: replica.map(Into::into), at_ms: 0, lasted_ms: 0, t, t_end }
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
