//! Conversation hand-over and durability between replicas: forwarded flows, fallbacks, cut
//! steps that keep their answer, the inbox journal, replay and the outbox. Every scenario runs
//! on the in-memory hub (paused time) and on a private real Redis (real time).
//!
//! Kept whole: every scenario shares the flows and the replica helpers defined along the
//! way, and the table at the top runs each on both backends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::{
    Ask, BotBuilder, BotError, Conversation, Durability, EndReason, Event, Fallback,
    FallbackReason, Flow, FlowHandover, Handover, HandoverOutcome, Inbound, MessageId, Step,
    Trigger,
};
use botmesh_testing::{FaultyStore, TestProvider};

use crate::backends::{Backend, Memory, Redis};
use crate::replicas::{LEASE, Replica, replica};

on_both_backends!(
    a_forwarded_flow_continues_on_the_other_replica_after_a_crash,
    a_forwarded_checkpoint_expires_after_the_ttl,
    a_graceful_stop_keeps_the_forwarded_checkpoint,
    a_replica_that_does_not_forward_resumes_and_clears_an_ephemeral_checkpoint,
    a_changed_flow_goes_to_the_fallback_with_reason_changed,
    a_flow_holding_state_that_is_not_json_goes_to_the_fallback,
    fallback_notify_tells_the_user_and_consumes_the_message,
    fallback_restart_enters_the_conversation_again,
    fallback_custom_function_decides,
    fallback_drop_writes_no_stub_and_routes_the_message,
    a_cut_step_s_embedded_answer_and_its_hook_transcript_reach_the_next_replica,
    a_cut_step_s_journaled_answer_reaches_the_next_replica,
    a_webhook_retry_delivered_to_a_second_replica_is_processed_once,
    a_message_queued_on_a_killed_replica_is_handled_by_another_after_the_lease,
    a_stalled_replica_s_message_is_taken_over_before_the_next_one,
    a_delivery_another_live_replica_holds_is_refused_until_it_is_done,
    a_retry_of_a_message_journaled_by_a_dead_replica_is_taken_over,
    a_replica_whose_leases_lapsed_refuses_deliveries_until_it_renews,
    a_delivery_whose_ticket_came_after_the_replica_froze_is_refused_not_acknowledged,
    a_re_run_step_s_send_reaches_the_user_once,
    a_reply_whose_send_failed_twice_goes_out_on_the_third_run,
    a_handler_run_that_ends_cleanly_writes_no_mark_and_a_later_run_looks_for_the_mark,
    a_later_run_whose_look_for_the_mark_lost_its_reply_still_sends,
    a_handler_run_that_fails_after_a_send_marks_it_before_its_message_runs_again,
    a_handler_s_send_is_marked_while_it_runs_and_not_repeated_by_its_takeover,
    with_mark_within_zero_a_handler_s_send_is_marked_at_once,
    a_step_resumed_on_its_recorded_answer_does_not_repeat_what_it_sent_for_it,
    an_answer_no_checkpoint_holds_is_released_and_handled_before_the_next_message,
    limit_without_durability_a_re_run_step_sends_again,
    later_answers_of_a_multi_question_step_are_forwarded,
    limit_an_answer_over_max_answer_bytes_is_not_embedded,
    limit_a_conversation_cut_before_its_first_wait_leaves_no_stub,
);

const INTERRUPTED: &str = "Sorry, our conversation was interrupted. Let's start again.";

/// A flow without `.persistent()`.
fn order() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .ask(Ask::new("size", "Size?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"))
        .do_step("done", |c| async move {
            let size: String = c.get("size").unwrap_or_default();
            let qty: String = c.get("qty").unwrap_or_default();
            c.send(format!("{qty} x {size}")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

fn forward(handover: Handover) -> Handover {
    handover.flows(FlowHandover::Forward)
}

fn with(handover: Handover, flow: Flow) -> impl FnOnce(BotBuilder) -> BotBuilder {
    move |b| b.handover(handover).flow(flow)
}

fn outcomes(r: &Replica) -> Vec<HandoverOutcome> {
    r.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Handover { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect()
}

/// Injects a message with an explicit id (replicas' test providers would otherwise hand out
/// the same ids, which the shared journal takes for retries).
fn say(r: &Replica, id: &str, text: &str) {
    r.provider.inject(Inbound::text("test", MessageId::from(id), "c", text));
}

async fn a_forwarded_flow_continues_on_the_other_replica_after_a_crash(backend: &impl Backend) {
    let h = || forward(Handover::new());
    let a = replica(backend, "a", TestProvider::new(), |c| c, with(h(), order())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(h(), order())).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    assert!(backend.store().get_checkpoint("test:c").await.unwrap().is_some(), "a forwarded it");
    a.coordinator.crash();
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    b.provider.say("c", "2");
    b.provider.settled(&b.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Size?"]);
    assert_eq!(b.provider.texts_to("c"), ["How many?", "2 x M"], "b went on at the right step");
    assert!(outcomes(&b).contains(&HandoverOutcome::Continued));
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "cleared at the end");
}

async fn a_forwarded_checkpoint_expires_after_the_ttl(backend: &impl Backend) {
    let h = || forward(Handover::new()).ttl(Duration::from_secs(2));
    let a = replica(backend, "a", TestProvider::new(), |c| c, with(h(), order())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(h(), order())).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    a.coordinator.crash();
    // Real seconds on Redis: the store's expiry runs on its own clock.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert!(b.provider.texts_to("c").is_empty(), "the expired flow is gone: M routes as new");
}

async fn a_graceful_stop_keeps_the_forwarded_checkpoint(backend: &impl Backend) {
    let h = || forward(Handover::new());
    let a = replica(backend, "a", TestProvider::new(), |c| c, with(h(), order())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(h(), order())).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    a.bot.stop().await.unwrap();
    b.provider.say("c", "L");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["How many?"]);
}

async fn a_replica_that_does_not_forward_resumes_and_clears_an_ephemeral_checkpoint(
    backend: &impl Backend,
) {
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, with(forward(Handover::new()), order()))
            .await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(Handover::new(), order())).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "S");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["How many?"]);
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "b cleared it");
    b.provider.say("c", "1");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["How many?", "1 x S"], "and went on in memory");
}

async fn a_changed_flow_goes_to_the_fallback_with_reason_changed(backend: &impl Backend) {
    let changed = Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .ask(Ask::new("size", "Which size: S, M or L?").choices(["S", "M", "L"]))
        .ask(Ask::new("qty", "How many?"));
    let a =
        replica(backend, "a", TestProvider::new(), |c| c, with(forward(Handover::new()), order()))
            .await;
    let h = forward(Handover::new()).fallback(Fallback::Notify);
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(h, changed)).await;
    a.provider.say("c", "order");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "M");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [INTERRUPTED], "not resumed at the wrong step");
    assert_eq!(outcomes(&b), [HandoverOutcome::Notified(FallbackReason::Changed)]);
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
}

async fn a_flow_holding_state_that_is_not_json_goes_to_the_fallback(backend: &impl Backend) {
    /// Stands for a client or handle a flow keeps between steps.
    struct Handle;
    let quote = || {
        Flow::new("quote")
            .trigger(Trigger::keyword("quote"))
            .do_step("connect", |c| async move {
                c.set_local("pricing", Handle);
                Ok::<_, BotError>(Step::Next)
            })
            .ask(Ask::new("amount", "Amount?"))
    };
    let h = || forward(Handover::new()).fallback(Fallback::Notify);
    let a = replica(backend, "a", TestProvider::new(), |c| c, with(h(), quote())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, with(h(), quote())).await;
    a.provider.say("c", "quote");
    a.provider.settled(&a.bot).await;
    let stub = backend.store().get_checkpoint("test:c").await.unwrap().unwrap();
    assert!(stub.data.contains("not-json"), "a stub, not the flow: {}", stub.data);
    b.provider.say("c", "5");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), [INTERRUPTED]);
    assert_eq!(outcomes(&b), [HandoverOutcome::Notified(FallbackReason::NotJson)]);
}

fn support() -> Conversation {
    Conversation::new("support", |c| async move {
        let problem = c.ask("What went wrong?").await?;
        c.send(format!("Noted: {}", problem.body)).await?;
        Ok::<_, BotError>(())
    })
    .trigger(Trigger::keyword("help"))
}

fn echo(b: BotBuilder) -> BotBuilder {
    b.on_message(|ctx| async move {
        ctx.reply(format!("echo {}", ctx.body())).await?;
        Ok::<_, BotError>(())
    })
}

/// Two replicas running `support` with `fallback`; a starts it, b gets the answer.
async fn conversation_cut_over(
    backend: &impl Backend,
    fallback: impl Fn() -> Fallback,
) -> (Replica, Replica) {
    let bot = |f: Fallback| {
        move |b: BotBuilder| echo(b.handover(Handover::new().fallback(f)).conversation(support()))
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot(fallback())).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot(fallback())).await;
    a.provider.say("c", "help");
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["What went wrong?"]);
    a.coordinator.crash();
    b.provider.say("c", "printer");
    b.provider.settled(&b.bot).await;
    (a, b)
}

async fn fallback_notify_tells_the_user_and_consumes_the_message(backend: &impl Backend) {
    let (_a, b) = conversation_cut_over(backend, || Fallback::Notify).await;
    assert_eq!(b.provider.texts_to("c"), [INTERRUPTED]);
    assert_eq!(outcomes(&b), [HandoverOutcome::Notified(FallbackReason::Conversation)]);
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "the stub is cleared"
    );
}

async fn fallback_restart_enters_the_conversation_again(backend: &impl Backend) {
    let (_a, b) = conversation_cut_over(backend, || Fallback::Restart).await;
    assert_eq!(b.provider.texts_to("c"), ["What went wrong?"], "entered again from its start");
    assert_eq!(outcomes(&b), [HandoverOutcome::Restarted(FallbackReason::Conversation)]);
    b.provider.say("c", "paper jam");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["What went wrong?", "Noted: paper jam"]);
}

async fn fallback_custom_function_decides(backend: &impl Backend) {
    let custom = || {
        Fallback::custom(|info, ctx| async move {
            if ctx.body() == "printer" {
                ctx.reply(format!("{} was cut ({})", info.name, info.reason.as_str())).await?;
                return Ok::<_, BotError>(true);
            }
            Ok(false)
        })
    };
    let (_a, b) = conversation_cut_over(backend, custom).await;
    assert_eq!(b.provider.texts_to("c"), ["support was cut (conversation)"]);
    assert_eq!(
        outcomes(&b),
        [HandoverOutcome::Custom { reason: FallbackReason::Conversation, consumed: true }]
    );
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None);
}

async fn fallback_drop_writes_no_stub_and_routes_the_message(backend: &impl Backend) {
    let bot = |b: BotBuilder| echo(b.conversation(support()));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    a.provider.say("c", "help");
    a.provider.settled(&a.bot).await;
    assert_eq!(backend.store().get_checkpoint("test:c").await.unwrap(), None, "no write at all");
    b.provider.say("c", "printer");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["echo printer"], "routed as a new message");
}

/// A step that takes its first answer, works (slowly on the first replica, past `settle`),
/// then asks a second question.
fn survey(slow: bool) -> Flow {
    Flow::new("survey").trigger(Trigger::keyword("go")).persistent().do_step(
        "work",
        move |c| async move {
            let m = c.ask("Ready?").await?;
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            c.send(format!("finished after {} ({})", m.body, m.kind)).await?;
            let name = c.ask("Name?").await?;
            c.send(format!("bye {}", name.body)).await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

/// A voice note's transcript, as a speech-to-text hook would make it; counts its calls.
fn transcribe(calls: Arc<AtomicUsize>) -> impl FnOnce(BotBuilder) -> BotBuilder {
    move |b| {
        b.before_message(move |mut m| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if let Some(words) = m.body.strip_prefix("voice:") {
                    let words = format!("{words} (transcribed)");
                    m.set_body(words).set_kind("voice-transcript");
                }
                Ok::<_, BotError>(m)
            }
        })
    }
}

async fn cut_step_scenario(backend: &impl Backend, durable: bool, form: &str) {
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let (a_calls, b_calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let bot = move |slow: bool, calls: &Arc<AtomicUsize>| {
        let hook = transcribe(Arc::clone(calls));
        move |b: BotBuilder| {
            let b = hook(b).flow(survey(slow));
            if durable { b.durability(Durability::new()) } else { b }
        }
    };
    let a = replica(backend, "a", TestProvider::new(), settle, bot(true, &a_calls)).await;
    let b = replica(backend, "b", TestProvider::new(), settle, bot(false, &b_calls)).await;
    say(&a, "a1", "go");
    a.provider.settled(&a.bot).await;
    say(&a, "a2", "voice:yes");
    a.provider.settled(&a.bot).await;
    assert!(
        a.rec
            .events()
            .iter()
            .any(|e| matches!(e, Event::ConversationEnded { reason: EndReason::Suspended, .. })),
        "a's step was cut at settle"
    );
    let checkpoint = backend.store().get_checkpoint("test:c").await.unwrap().unwrap();
    assert!(checkpoint.data.contains(form), "answer recorded as {form}: {}", checkpoint.data);
    say(&b, "b1", "Ann");
    b.provider.settled(&b.bot).await;
    assert_eq!(
        b.provider.texts_to("c"),
        ["finished after yes (transcribed) (voice-transcript)", "bye Ann"],
        "b was fed the recorded answer as the hooks made it, and kept Ann for the next question"
    );
    assert_eq!(b_calls.load(Ordering::SeqCst), 1, "b's hooks ran for Ann only");
    assert_eq!(a_calls.load(Ordering::SeqCst), 2);
}

async fn a_cut_step_s_embedded_answer_and_its_hook_transcript_reach_the_next_replica(
    backend: &impl Backend,
) {
    cut_step_scenario(backend, false, r#""form":"embedded""#).await;
}

async fn a_cut_step_s_journaled_answer_reaches_the_next_replica(backend: &impl Backend) {
    cut_step_scenario(backend, true, r#""form":"journaled""#).await;
}

fn durable(b: BotBuilder) -> BotBuilder {
    b.durability(Durability::new().replay_every(Duration::from_millis(100)))
}

async fn a_webhook_retry_delivered_to_a_second_replica_is_processed_once(backend: &impl Backend) {
    let bot = |b: BotBuilder| echo(durable(b));
    let a = replica(backend, "a", TestProvider::new(), |c| c, bot).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, bot).await;
    say(&a, "w1", "pay me");
    say(&b, "w1", "pay me");
    a.provider.settled(&a.bot).await;
    b.provider.settled(&b.bot).await;
    let sent = [a.provider.texts_to("c"), b.provider.texts_to("c")].concat();
    assert_eq!(sent, ["echo pay me"], "handled on one replica only");
    let dup = |r: &Replica| r.rec.events().iter().any(|e| matches!(e, Event::Duplicate { .. }));
    assert!(dup(&a) || dup(&b), "the other one saw it as a duplicate");
}

/// Says "pay me" on `a` and checks that its reply goes out, once, and that no run took a send
/// for done.
async fn pay_me_is_answered_once(a: &Replica) {
    say(a, "a1", "pay me");
    let sent = tokio::time::timeout(Duration::from_secs(30), a.provider.wait_sent(1)).await;
    assert!(sent.is_ok(), "the reply never went out: {:?}", a.rec.events());
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["echo pay me"]);
    let skipped = a.rec.events().iter().any(|e| matches!(e, Event::SendSkipped { .. }));
    assert!(!skipped, "no run took a send for done: {:?}", a.rec.events());
}

async fn a_reply_whose_send_failed_twice_goes_out_on_the_third_run(backend: &impl Backend) {
    // The platform refuses the reply twice: each run gives the message back, and the outbox
    // entry it claimed with it, so the third run sends the reply instead of skipping it.
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| echo(durable(b))).await;
    a.provider.fail_sends(2);
    pay_me_is_answered_once(&a).await;
    let failed = a.rec.errors().iter().filter(|e| e.to_string().contains("handler failed")).count();
    assert_eq!(failed, 2, "{:?}", a.rec.errors());
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "acknowledged once sent"
    );
}

/// A replica `name` on `backend` with `provider`, running `bot` over a [`FaultyStore`] around
/// the backend's store, which lists its outbox calls.
async fn over_faulty_store(
    backend: &impl Backend,
    name: &str,
    provider: TestProvider,
    bot: impl FnOnce(BotBuilder) -> BotBuilder,
) -> (Replica, Arc<FaultyStore>) {
    let store = Arc::new(FaultyStore::new(backend.store()));
    let with_store = {
        let store = Arc::clone(&store);
        move |b: BotBuilder| bot(b).store(store)
    };
    (replica(backend, name, provider, |c| c, with_store).await, store)
}

async fn a_handler_run_that_ends_cleanly_writes_no_mark_and_a_later_run_looks_for_the_mark(
    backend: &impl Backend,
) {
    let (a, store) =
        over_faulty_store(backend, "a", TestProvider::new(), |b| echo(durable(b))).await;
    // A handler's run that ends cleanly is acknowledged and never runs again: the mark of its
    // reply is not written.
    say(&a, "a1", "hi");
    a.provider.wait_sent(1).await;
    a.provider.settled(&a.bot).await;
    assert!(store.outbox_calls().is_empty(), "no mark for a run that ended cleanly");
    // The first run's send fails and marks nothing; the second run reads the mark to see
    // whether an earlier run sent, finds none, and sends.
    a.provider.fail_sends(1);
    say(&a, "a2", "again");
    let sent = tokio::time::timeout(Duration::from_secs(30), a.provider.wait_sent(2)).await;
    assert!(sent.is_ok(), "the reply never went out: {:?}", a.rec.events());
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["echo hi", "echo again"]);
    assert_eq!(store.outbox_calls(), ["marked"]);
}

async fn a_later_run_whose_look_for_the_mark_lost_its_reply_still_sends(backend: &impl Backend) {
    let (a, store) =
        over_faulty_store(backend, "a", TestProvider::new(), |b| echo(durable(b))).await;
    // The first run's send fails; the second run's look for the mark reaches the store and
    // its reply is lost. Asked again, it must not take what the first ask did for an earlier
    // run's send: nothing was sent yet.
    a.provider.fail_sends(1);
    store.lose_outbox_replies(1);
    pay_me_is_answered_once(&a).await;
    assert_eq!(store.outbox_calls(), ["marked", "marked"], "asked again, then sent");
}

async fn a_handler_run_that_fails_after_a_send_marks_it_before_its_message_runs_again(
    backend: &impl Backend,
) {
    let provider = TestProvider::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let bot = {
        let provider = provider.clone();
        move |b: BotBuilder| {
            durable(b).on_message(move |ctx| {
                let (provider, runs) = (provider.clone(), Arc::clone(&runs));
                async move {
                    ctx.reply("one").await?;
                    // The platform refuses the second reply of the first run.
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        provider.fail_sends(1);
                    }
                    ctx.reply("two").await?;
                    Ok::<_, BotError>(())
                }
            })
        }
    };
    let (a, store) = over_faulty_store(backend, "a", provider, bot).await;
    say(&a, "a1", "go");
    let sent = tokio::time::timeout(Duration::from_secs(30), a.provider.wait_sent(2)).await;
    assert!(sent.is_ok(), "the second reply never went out: {:?}", a.rec.events());
    a.provider.settled(&a.bot).await;
    // The failed run wrote the mark of "one" before its message was handed back; the next
    // run found it and skipped the send.
    assert_eq!(a.provider.texts_to("c"), ["one", "two"], "each reply once");
    assert_eq!(store.outbox_calls(), ["mark", "marked", "marked"]);
    assert!(a.rec.events().iter().any(|e| matches!(e, Event::SendSkipped { .. })));
}

async fn with_mark_within_zero_a_handler_s_send_is_marked_at_once(backend: &impl Backend) {
    let at_once = |b: BotBuilder| echo(b.durability(Durability::new().mark_within(Duration::ZERO)));
    let (a, store) = over_faulty_store(backend, "a", TestProvider::new(), at_once).await;
    say(&a, "a1", "hi");
    a.provider.wait_sent(1).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(store.outbox_calls(), ["mark"], "marked right after the send");
}

/// Replies "working", works (for an hour on a slow replica), and replies "done".
fn work_then_done(slow: bool) -> impl Fn(BotBuilder) -> BotBuilder + Copy {
    move |b| {
        durable(b).on_message(move |ctx| async move {
            ctx.reply("working").await?;
            if slow {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            ctx.reply("done").await?;
            Ok::<_, BotError>(())
        })
    }
}

async fn a_handler_s_send_is_marked_while_it_runs_and_not_repeated_by_its_takeover(
    backend: &impl Backend,
) {
    let (a, store) =
        over_faulty_store(backend, "a", TestProvider::new(), work_then_done(true)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, work_then_done(false)).await;
    say(&a, "a1", "go");
    a.provider.wait_sent(1).await;
    // The handler still runs: its mark is written `mark_within` (20 ms) after the send.
    // Generous: a loaded machine may run the timer late.
    let marked = tokio::time::timeout(Duration::from_secs(10), async {
        while store.outbox_calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(marked.await.is_ok(), "the mark was not written while the handler ran");
    assert_eq!(store.outbox_calls(), ["mark"]);
    // b takes the message over once a's lease ran out, and runs the handler again.
    taken_over_without_repeating(&a, &b, "working").await;
}

/// Echoes, after an hour for "slow" on a slow replica.
fn slow_echo(name: &'static str, slow: bool) -> impl Fn(BotBuilder) -> BotBuilder + Copy {
    move |b| {
        durable(b).on_message(move |ctx| async move {
            if slow && ctx.body() == "slow" {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            ctx.reply(format!("{name} did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    }
}

async fn a_message_queued_on_a_killed_replica_is_handled_by_another_after_the_lease(
    backend: &impl Backend,
) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", true)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", false)).await;
    say(&a, "a1", "slow");
    tokio::time::sleep(Duration::from_millis(20)).await;
    say(&a, "a2", "queued");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = tokio::time::Instant::now();
    a.coordinator.crash();
    b.provider.wait_sent(2).await;
    let waited = t0.elapsed();
    assert!(waited >= LEASE * 2 / 3 - Duration::from_millis(50), "after a's lease: {waited:?}");
    assert_eq!(b.provider.texts_to("c"), ["b did slow", "b did queued"], "replayed in order");
    assert!(a.provider.sent().is_empty());
    let replayed = b.rec.events().iter().filter(|e| matches!(e, Event::TakenOver { .. })).count();
    assert_eq!(replayed, 2);
    b.provider.settled(&b.bot).await;
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "both acknowledged"
    );
}

/// A persistent flow whose step sends, works (for an hour on a slow replica), and sends again.
fn pay(slow: bool) -> Flow {
    Flow::new("pay").trigger(Trigger::keyword("pay")).persistent().do_step(
        "charge",
        move |c| async move {
            c.send("charged").await?;
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            c.send("done").await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

async fn a_re_run_step_s_send_reaches_the_user_once(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| durable(b).flow(pay(true))).await;
    let b =
        replica(backend, "b", TestProvider::new(), |c| c, |b| durable(b).flow(pay(false))).await;
    say(&a, "a1", "pay");
    a.provider.wait_sent(1).await;
    // b replays "pay" once a's lease ran out, and runs the step again.
    taken_over_without_repeating(&a, &b, "charged").await;
}

/// Crashes `a`, which sent `first` and then went on working, and checks that `b`, taking the
/// message over, skips `first` and sends only "done".
async fn taken_over_without_repeating(a: &Replica, b: &Replica, first: &str) {
    a.coordinator.crash();
    b.provider.wait_sent(1).await;
    b.provider.settled(&b.bot).await;
    assert_eq!(a.provider.texts_to("c"), [first]);
    assert_eq!(b.provider.texts_to("c"), ["done"], "{first:?} went out once, from a");
    assert!(b.rec.events().iter().any(|e| matches!(e, Event::SendSkipped { .. })));
}

/// A persistent flow whose step asks, says what it got, works (for an hour on a slow replica),
/// and ends.
fn confirm(slow: bool) -> Flow {
    Flow::new("confirm").trigger(Trigger::keyword("confirm")).persistent().do_step(
        "ask",
        move |c| async move {
            let answer = c.ask("Sure?").await?;
            c.send(format!("got {}", answer.body)).await?;
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            c.send("done").await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

async fn a_step_resumed_on_its_recorded_answer_does_not_repeat_what_it_sent_for_it(
    backend: &impl Backend,
) {
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let a = replica(backend, "a", TestProvider::new(), settle, |b| durable(b).flow(confirm(true)));
    let a = a.await;
    let b = replica(backend, "b", TestProvider::new(), settle, |b| durable(b).flow(confirm(false)));
    let b = b.await;
    say(&a, "a1", "confirm");
    a.provider.wait_sent(1).await;
    say(&a, "a2", "yes");
    a.provider.wait_sent(2).await;
    // The step outlives `settle` on a: it is cut, its checkpoint holding the answer.
    a.provider.settled(&a.bot).await;
    // The user's next message wakes the step up on b, with the recorded answer.
    say(&b, "b1", "next");
    b.provider.wait_sent(1).await;
    b.provider.settled(&b.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["Sure?", "got yes"]);
    assert_eq!(b.provider.texts_to("c"), ["done"], "\"got yes\" went out once, from a");
    assert!(b.rec.events().iter().any(|e| matches!(e, Event::SendSkipped { .. })));
}

async fn an_answer_no_checkpoint_holds_is_released_and_handled_before_the_next_message(
    backend: &impl Backend,
) {
    // a's step takes its second answer, but the checkpoint write recording it never answers:
    // the step is cut at settle with that answer held by no checkpoint. The user's next
    // message reached b meanwhile; the released answer is handled first, on its question.
    let store = Arc::new(FaultyStore::new(backend.store()));
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let then = |b: BotBuilder| {
        b.on_message(|ctx| async move {
            ctx.reply(format!("then {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    };
    let a_bot = {
        let store = Arc::clone(&store);
        move |b: BotBuilder| then(durable(b).store(store).flow(two_questions(true)))
    };
    let a = replica(backend, "a", TestProvider::new(), settle, a_bot).await;
    let b = replica(backend, "b", TestProvider::new(), settle, |b| {
        then(durable(b).flow(two_questions(false)))
    })
    .await;
    say(&a, "a1", "form");
    a.provider.settled(&a.bot).await;
    say(&a, "a2", "1");
    a.provider.settled(&a.bot).await;
    store.hang_checkpoint_writes(1);
    say(&a, "a3", "2");
    tokio::time::sleep(Duration::from_millis(100)).await;
    say(&b, "b1", "3");
    b.provider.wait_sent(2).await;
    a.provider.settled(&a.bot).await;
    b.provider.settled(&b.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["First?", "Second?"]);
    assert_eq!(
        b.provider.texts_to("c"),
        ["1 2", "then 3"],
        "each answer on its question, in order"
    );
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "all acknowledged"
    );
}

async fn limit_without_durability_a_re_run_step_sends_again(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, |b| b.flow(pay(true))).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, |b| b.flow(pay(false))).await;
    a.provider.say("c", "pay");
    a.provider.wait_sent(1).await;
    a.coordinator.crash();
    b.provider.say("c", "hello?");
    b.provider.settled(&b.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["charged"]);
    assert_eq!(b.provider.texts_to("c"), ["charged", "done"], "at least once: sent again");
}

/// A step with two questions, slow after the second answer on the first replica.
fn two_questions(slow: bool) -> Flow {
    Flow::new("form").trigger(Trigger::keyword("form")).persistent().do_step(
        "fill",
        move |c| async move {
            let one = c.ask("First?").await?;
            let two = c.ask("Second?").await?;
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            c.send(format!("{} {}", one.body, two.body)).await?;
            Ok::<_, BotError>(Step::Next)
        },
    )
}

async fn later_answers_of_a_multi_question_step_are_forwarded(backend: &impl Backend) {
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let a =
        replica(backend, "a", TestProvider::new(), settle, |b| b.flow(two_questions(true))).await;
    let b =
        replica(backend, "b", TestProvider::new(), settle, |b| b.flow(two_questions(false))).await;
    a.provider.say("c", "form");
    a.provider.settled(&a.bot).await;
    a.provider.say("c", "1");
    a.provider.settled(&a.bot).await;
    a.provider.say("c", "2");
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "x");
    b.provider.settled(&b.bot).await;
    // Both answers were recorded before the step was cut: b replays them to their questions,
    // and "x", which no question of the finished flow takes, routes as a new message.
    assert_eq!(b.provider.texts_to("c"), ["1 2"]);
}

async fn limit_an_answer_over_max_answer_bytes_is_not_embedded(backend: &impl Backend) {
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let h = || Handover::new().max_answer_bytes(64);
    let a = replica(backend, "a", TestProvider::new(), settle, with(h(), survey(true))).await;
    let b = replica(backend, "b", TestProvider::new(), settle, with(h(), survey(false))).await;
    a.provider.say("c", "go");
    a.provider.settled(&a.bot).await;
    a.provider.say("c", &"y".repeat(200));
    a.provider.settled(&a.bot).await;
    b.provider.say("c", "hello");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["Ready?"], "the step starts again and asks again");
}

async fn limit_a_conversation_cut_before_its_first_wait_leaves_no_stub(backend: &impl Backend) {
    let slow_start = |slow: bool| {
        Conversation::new("support", move |c| async move {
            if slow {
                c.sleep(Duration::from_secs(3600)).await;
            }
            let problem = c.ask("What went wrong?").await?;
            c.send(format!("Noted: {}", problem.body)).await?;
            Ok::<_, BotError>(())
        })
        .trigger(Trigger::keyword("help"))
    };
    let settle = |c: CoordinationConfig| c.settle(Duration::from_secs(1));
    let bot = move |slow: bool| {
        move |b: BotBuilder| {
            echo(
                b.handover(Handover::new().fallback(Fallback::Notify))
                    .conversation(slow_start(slow)),
            )
        }
    };
    let a = replica(backend, "a", TestProvider::new(), settle, bot(true)).await;
    let b = replica(backend, "b", TestProvider::new(), settle, bot(false)).await;
    a.provider.say("c", "help");
    a.provider.settled(&a.bot).await;
    assert_eq!(
        backend.store().get_checkpoint("test:c").await.unwrap(),
        None,
        "nothing to hand over"
    );
    b.provider.say("c", "printer");
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["echo printer"]);
}

async fn a_stalled_replica_s_message_is_taken_over_before_the_next_one(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", true)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", false)).await;
    say(&a, "m1", "slow");
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.set_stalled(true);
    say(&b, "m2", "next");
    b.provider.wait_sent(2).await;
    assert_eq!(b.provider.texts_to("c"), ["b did slow", "b did next"], "m1 first, then m2");
    assert!(a.provider.sent().is_empty(), "the stalled replica answered nothing");
    b.provider.settled(&b.bot).await;
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "both acknowledged"
    );
}

/// A webhook delivery of message `id`, as [`Bot::accept`] takes it.
fn delivery(id: &str, text: &str) -> Inbound {
    Inbound::text("test", MessageId::from(id), "c", text)
}

async fn a_delivery_another_live_replica_holds_is_refused_until_it_is_done(backend: &impl Backend) {
    let work = |b: BotBuilder| {
        durable(b).on_message(|ctx| async move {
            // Long enough for the test's second delivery to come while a still handles it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            ctx.reply(format!("did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, work).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, work).await;
    assert_eq!(
        a.bot.accept(delivery("w1", "pay")).await.unwrap(),
        botmesh_core::Accepted::Queued,
        "a takes it"
    );
    // The sender gave up waiting on a and delivers it to b, while a handles it.
    assert!(b.bot.accept(delivery("w1", "pay")).await.is_err(), "b: deliver it again later");
    a.provider.wait_sent(1).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(
        b.bot.accept(delivery("w1", "pay")).await.unwrap(),
        botmesh_core::Accepted::Duplicate,
        "b: done, a duplicate"
    );
    b.provider.settled(&b.bot).await;
    assert!(b.provider.sent().is_empty(), "handled once, on a");
}

async fn a_retry_of_a_message_journaled_by_a_dead_replica_is_taken_over(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", true)).await;
    let b = replica(backend, "b", TestProvider::new(), |c| c, slow_echo("b", false)).await;
    assert_eq!(a.bot.accept(delivery("w1", "slow")).await.unwrap(), botmesh_core::Accepted::Queued);
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.crash();
    // The sender, without an answer from a, delivers it to b until b acknowledges it: once a
    // is known dead (at once on the hub, after its lease on Redis), b takes it over.
    let t0 = tokio::time::Instant::now();
    loop {
        if b.bot.accept(delivery("w1", "slow")).await.is_ok() {
            break;
        }
        assert!(t0.elapsed() < LEASE * 5, "b never took it");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.provider.wait_sent(1).await;
    b.provider.settled(&b.bot).await;
    assert_eq!(b.provider.texts_to("c"), ["b did slow"], "handled once, by b");
    assert!(a.provider.sent().is_empty());
    assert!(
        backend.store().journal().unwrap().inbox_pending(10).await.unwrap().is_empty(),
        "acknowledged"
    );
}

async fn a_delivery_whose_ticket_came_after_the_replica_froze_is_refused_not_acknowledged(
    backend: &impl Backend,
) {
    // Without durability: the delivery enters `accept` while the replica is healthy, but its
    // ticket comes back only after the replica stopped being able to renew its leases.
    let plain = |b: BotBuilder| {
        b.on_message(|ctx| async move {
            ctx.reply(format!("did {}", ctx.body())).await?;
            Ok::<_, BotError>(())
        })
    };
    let a = replica(backend, "a", TestProvider::new(), |c| c, plain).await;
    a.coordinator.delay_tickets(LEASE);
    let accepting = {
        let bot = a.bot.clone();
        tokio::spawn(async move { bot.accept(delivery("w1", "hi")).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.coordinator.set_stalled(true);
    let answered = accepting.await.unwrap();
    assert!(answered.is_err(), "refused, so the sender delivers it again: {answered:?}");
    a.coordinator.delay_tickets(Duration::ZERO);
    a.coordinator.set_stalled(false);
    let t0 = tokio::time::Instant::now();
    while a.bot.accept(delivery("w1", "hi")).await.is_err() {
        assert!(t0.elapsed() < LEASE * 5, "never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.provider.wait_sent(1).await;
    a.provider.settled(&a.bot).await;
    assert_eq!(a.provider.texts_to("c"), ["did hi"], "handled once, from the redelivery");
}

async fn a_replica_whose_leases_lapsed_refuses_deliveries_until_it_renews(backend: &impl Backend) {
    let a = replica(backend, "a", TestProvider::new(), |c| c, slow_echo("a", false)).await;
    a.coordinator.set_stalled(true);
    // Past the stall rule (two thirds of the lease without a renewal).
    tokio::time::sleep(LEASE).await;
    assert!(a.bot.accept(delivery("w1", "hi")).await.is_err(), "refused: deliver it elsewhere");
    assert!(a.provider.sent().is_empty());
    a.coordinator.set_stalled(false);
    // Taken again once a renewal lands.
    let t0 = tokio::time::Instant::now();
    while a.bot.accept(delivery("w1", "hi")).await.is_err() {
        assert!(t0.elapsed() < LEASE * 5, "never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.provider.wait_sent(1).await;
    assert_eq!(a.provider.texts_to("c"), ["a did hi"], "handled once, after the renewal");
}
