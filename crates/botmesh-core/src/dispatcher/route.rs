//! Routing a message under the chat's turn: the hooks, then the waiting conversation (in
//! memory or resumed from the store), a trigger, or the handlers.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use botmesh_traits::{ChatRecord, ErrorKind, Inbound, Recovery};
use futures_util::FutureExt;

use super::exits::Exit;
use super::job::Work;
use super::panic_message;
use super::resume::Found;
use super::worker::Worker;
use crate::clock::now_ms;
use crate::conv::Input;
use crate::flow::Def;
use crate::handover::FlowHandover;
use crate::{BotError, Event, HandoverOutcome, Message};

impl Worker {
    /// Runs the work; returns whether it did anything (a stale timer does not).
    ///
    /// Not an `async fn`, nor are [`Worker::on_message`] and `Worker::handle`: an `async fn`
    /// keeps a by-value argument twice in its future (as passed, and moved into its body) and
    /// copies it from one to the other when first polled; an `async move` block keeps it once.
    /// Every message's job nests these futures, and its message goes through each.
    #[expect(clippy::manual_async_fn, reason = "an `async fn` holds its argument twice")]
    pub(super) fn work(
        &mut self,
        work: Work,
        changed_hands: bool,
    ) -> impl Future<Output = bool> + Send + '_ {
        async move {
            match work {
                // In the message's span (see `Worker::run_job`).
                Work::Message(inbound) => {
                    self.on_message(inbound, changed_hands).await;
                    true
                }
                // Boxed, as the other paths only some messages take: the common one stays small.
                Work::Timer { serial, park, timer } => {
                    Box::pin(self.on_timer(serial, park, timer)).await
                }
                // What it takes over is run item by item before it; it has no work of its own.
                Work::TakeOver { .. } => false,
            }
        }
    }

    /// Handles a message: the hooks, then its answer (see [`Worker::answer`]).
    #[expect(clippy::manual_async_fn, reason = "an `async fn` holds its argument twice")]
    pub(super) fn on_message(
        &mut self,
        inbound: Inbound,
        changed_hands: bool,
    ) -> impl Future<Output = ()> + Send + '_ {
        async move {
            let shared = Arc::clone(self.shared());
            let id = inbound.id.clone();
            self.current = Some(id.clone());
            if !self.seen_chat {
                self.seen_chat = true;
                let record =
                    ChatRecord::new(inbound.chat.clone(), inbound.provider.clone(), now_ms());
                if let Err(e) = shared.store.upsert_chat(&record).await {
                    self.report(e.into());
                }
            }
            let Some(msg) = self.run_hooks(Message::new(inbound)).await else { return };
            // Only a chat that may have something in the store this bot can use costs a read:
            // persistent flows, hand-over writes, or another replica having held the chat of a bot
            // with flows (a replica that does not forward still resumes a forwarded checkpoint
            // once). A bot without flows routes every message as new: a hand-off costs no read.
            let def = &shared.def;
            let reads = def.has_persistent
                || def.handover.writes_anything()
                || (changed_hands && def.has_flows);
            let found = match self.active {
                None if reads => match Box::pin(self.load_checkpoint(&msg)).await {
                    Ok(found) => found,
                    Err(e) => {
                        // A conversation may be parked on this very message: routed as new, the
                        // answer would go to a handler and the flow take the next message for it,
                        // or the replica that reads the row later answer it after its successors.
                        // A store failing under the message, as for a write: with durability it is
                        // handed back and replayed; without, it is reported and dropped.
                        self.outcome.faulted = true;
                        self.report(e);
                        self.current = None;
                        return;
                    }
                },
                _ => None,
            };
            match self.exit_for(&msg, found.as_ref()) {
                Some(Exit::Cancel) => Box::pin(self.cancel(&msg, found)).await,
                Some(Exit::Interrupt(def)) => Box::pin(self.interrupt(msg, found, def)).await,
                // Shared from here on, as the handlers' contexts share it: each layer below holds
                // a pointer to it, not a copy.
                None => self.answer(Arc::new(msg), found, changed_hands).await,
            }
            while let Some(kept) = self.leftover.take() {
                self.route(Arc::new(kept)).await;
            }
            self.current = None;
            shared.events.emit(Event::Handled { key: self.key.clone(), id });
        }
    }

    /// Gives the message to the waiting conversation (in memory, or resumed from what the
    /// store holds), else routes it.
    pub(super) async fn answer(
        &mut self,
        msg: Arc<Message>,
        found: Option<Found>,
        changed_hands: bool,
    ) {
        let shared = Arc::clone(self.shared());
        if let Some(active) = self.active.as_mut() {
            active.parked = None;
            active.ctx.link().deliver(Input::Message(Arc::unwrap_or_clone(msg)));
            self.drive().await;
        } else {
            match found {
                Some(Found::Resume { def, resume, revision }) => {
                    if changed_hands {
                        shared.events.emit(Event::Handover {
                            key: self.key.clone(),
                            name: def.name().to_owned(),
                            outcome: HandoverOutcome::Continued,
                        });
                    }
                    // A replica that does not forward still resumes an ephemeral checkpoint
                    // once, and clears it.
                    let unforwarded = resume.ephemeral
                        && matches!(&def, Def::Flow(f) if !f.persistent)
                        && shared.def.handover.flows != FlowHandover::Forward;
                    self.install(def, Arc::unwrap_or_clone(msg), Some((*resume, revision)));
                    if unforwarded && let Some(active) = &self.active {
                        let cleared = active.ctx.clear_checkpoint().await;
                        if let Err(e) = cleared {
                            self.report(e);
                        }
                    }
                    self.drive().await;
                }
                Some(Found::Fallback { name, reason, state, revision }) => {
                    let msg = Arc::unwrap_or_clone(msg);
                    if let Some(msg) =
                        Box::pin(self.fallback(msg, name, reason, state, revision)).await
                    {
                        self.route(Arc::new(msg)).await;
                    }
                }
                None => self.route(msg).await,
            }
        }
    }

    /// Routes a message no conversation waits for: a trigger, else the handlers.
    pub(super) async fn route(&mut self, msg: Arc<Message>) {
        let shared = Arc::clone(self.shared());
        if let Some(def) =
            shared.def.triggered.iter().find(|d| d.triggers().iter().any(|t| t.matches(&msg)))
        {
            self.install(def.clone(), Arc::unwrap_or_clone(msg), None);
            self.drive().await;
        } else {
            self.run_handlers(msg).await;
        }
    }

    pub(super) async fn run_hooks(&mut self, mut msg: Message) -> Option<Message> {
        for hook in &self.shared().def.hooks {
            match AssertUnwindSafe(hook(msg)).catch_unwind().await {
                Ok(Ok(m)) => msg = m,
                Ok(Err(source)) => {
                    self.report(BotError::Handler { key: self.key.clone(), source });
                    return None;
                }
                Err(panic) => {
                    self.report(BotError::Panic {
                        key: self.key.clone(),
                        message: panic_message(&*panic),
                    });
                    return None;
                }
            }
        }
        Some(msg)
    }

    /// Runs the handlers in order, each with a context sharing `msg`.
    pub(super) async fn run_handlers(&mut self, msg: Arc<Message>) {
        let shared = Arc::clone(self.shared());
        for (slot, handler) in shared.def.handlers.iter().enumerate() {
            let ctx = self.ctx(Arc::clone(&msg), Some(slot));
            match AssertUnwindSafe(handler(ctx.clone())).catch_unwind().await {
                Ok(Ok(())) => {}
                // Cut short under it: its message is not done, and the handler is not to blame.
                Ok(Err(_)) if self.turn.is_cut() => self.outcome.cut = true,
                Ok(Err(source)) => {
                    let error = BotError::Handler { key: self.key.clone(), source };
                    // A lost turn was reported when it happened; the message goes to the next
                    // holder. A backend or the transport failing is not the handler's logic:
                    // with durability the message is handed back instead of acknowledged.
                    match error.kind() {
                        Some(ErrorKind::LeaseLost) => {}
                        Some(ErrorKind::ProviderNotLeader) => {
                            self.outcome.elsewhere = true;
                            self.report(error);
                        }
                        _ => {
                            self.outcome.faulted |= error.recovery() != Recovery::Fail;
                            self.report(error);
                        }
                    }
                }
                Err(panic) => self.report(BotError::Panic {
                    key: self.key.clone(),
                    message: panic_message(&*panic),
                }),
            }
            if let Some(name) = ctx.take_start() {
                match shared.def.defs.get(&name) {
                    Some(def) => {
                        self.install(def.clone(), Arc::unwrap_or_clone(msg), None);
                        self.drive().await;
                    }
                    None => self.report(BotError::UnknownConversation { name }),
                }
                return;
            }
        }
    }
}
