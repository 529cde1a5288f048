//! Resuming from the store: what a chat's checkpoint row holds (a flow to continue, or a stub
//! for the hand-over fallback), the recorded answers it replays, and the fallbacks.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use botmesh_traits::{CheckpointRecord, Error, Inbound};
use futures_util::FutureExt;

use super::{Worker, panic_message};
use crate::checkpoint::{Doc, RecordedAnswer};
use crate::flow::Def;
use crate::handover::{Fallback, FallbackReason, HandoverInfo};
use crate::runner::Resume;
use crate::texts::keys;
use crate::{BotError, Event, HandoverOutcome, Message, Result};

/// What the store holds for a chat without a conversation in memory.
pub(super) enum Found {
    /// A flow to continue.
    Resume { def: Def, resume: Box<Resume>, revision: u64 },
    /// A conversation that cannot continue here: the fallback applies.
    Fallback {
        name: String,
        reason: FallbackReason,
        state: serde_json::Map<String, serde_json::Value>,
        revision: u64,
    },
}

impl Worker {
    /// Applies the hand-over fallback to a conversation found as a stub (or a forwarded flow
    /// that changed). Returns the message when it still has to be routed.
    pub(super) async fn fallback(
        &mut self,
        msg: Message,
        name: String,
        reason: FallbackReason,
        state: serde_json::Map<String, serde_json::Value>,
        revision: u64,
    ) -> Option<Message> {
        let shared = Arc::clone(self.shared());
        // The stub goes first: whatever the fallback does, it does it once.
        self.clear_found(revision).await;
        let handover =
            |outcome| Event::Handover { key: self.key.clone(), name: name.clone(), outcome };
        match shared.def.handover.fallback.clone() {
            Fallback::Drop => {
                shared.events.emit(handover(HandoverOutcome::Discarded(reason)));
                Some(msg)
            }
            Fallback::Notify => {
                shared.events.emit(handover(HandoverOutcome::Notified(reason)));
                let text = shared.def.handover.notify_message.clone().unwrap_or_else(|| {
                    shared.def.texts.get(msg.lang.as_deref(), keys::INTERRUPTED).to_owned()
                });
                let ctx = self.ctx(msg, None);
                if let Err(e) = ctx.reply(text).await {
                    self.report(e);
                }
                None
            }
            Fallback::Restart => match shared.def.defs.get(&name).cloned() {
                Some(def) => {
                    shared.events.emit(handover(HandoverOutcome::Restarted(reason)));
                    self.install(def, msg, None);
                    self.drive().await;
                    None
                }
                None => {
                    shared.events.emit(handover(HandoverOutcome::Discarded(reason)));
                    Some(msg)
                }
            },
            Fallback::Custom(f) => {
                let info =
                    HandoverInfo { key: self.key.clone(), name: name.clone(), reason, state };
                let ctx = self.ctx(msg.clone(), None);
                let consumed = match AssertUnwindSafe(f(info, ctx.clone())).catch_unwind().await {
                    Ok(Ok(consumed)) => consumed,
                    Ok(Err(source)) => {
                        self.report(BotError::Handler { key: self.key.clone(), source });
                        false
                    }
                    Err(panic) => {
                        self.report(BotError::Panic {
                            key: self.key.clone(),
                            message: panic_message(&*panic),
                        });
                        false
                    }
                };
                shared.events.emit(handover(HandoverOutcome::Custom { reason, consumed }));
                match ctx.take_start() {
                    Some(start) => {
                        match shared.def.defs.get(&start).cloned() {
                            Some(def) => {
                                self.install(def, msg, None);
                                self.drive().await;
                            }
                            None => self.report(BotError::UnknownConversation { name: start }),
                        }
                        None
                    }
                    None => (!consumed).then_some(msg),
                }
            }
        }
    }

    /// Deletes the checkpoint found at `revision` (conditionally under coordination).
    pub(super) async fn clear_found(&mut self, revision: u64) {
        let shared = Arc::clone(self.shared());
        if let Err(e) = shared.checkpoints().clear(self.key.as_str(), revision).await {
            self.report(e.into());
        }
    }

    /// A message a checkpoint recorded as one of its step's answers, as the hooks made it.
    pub(super) async fn recorded_answer(&mut self, answer: &RecordedAnswer) -> Option<Message> {
        match answer {
            RecordedAnswer::Embedded { message } => Some((**message).clone()),
            RecordedAnswer::Journaled { id, body, kind, lang } => {
                let shared = Arc::clone(self.shared());
                let record = match async { shared.inbox()?.inbox_get(id).await }.await {
                    Ok(r) => r?,
                    Err(e) => {
                        self.report(e.into());
                        return None;
                    }
                };
                match serde_json::from_str::<Inbound>(&record.payload) {
                    Ok(inbound) => {
                        let mut m = Message::new(inbound);
                        m.body.clone_from(body);
                        m.kind.clone_from(kind);
                        m.lang.clone_from(lang);
                        Some(m)
                    }
                    Err(e) => {
                        self.report(Error::corrupt(format!("journaled message {id}"), e).into());
                        None
                    }
                }
            }
        }
    }

    /// Looks for a checkpoint to continue from, or a stub to hand to the fallback; `msg` is
    /// the message that woke the chat. A read that fails is the store's error: what the chat
    /// holds is unknown then, and the caller must not route `msg` as if it held nothing.
    pub(super) async fn load_checkpoint(&mut self, msg: &Message) -> Result<Option<Found>> {
        match self.shared().checkpoints().read(self.key.as_str()).await? {
            Some(record) => Ok(self.found_in(record, Some(msg)).await),
            None => Ok(None),
        }
    }

    /// What checkpoint row `record` holds: a flow to continue (handing `waking` to the wait
    /// it was parked on), or a stub for the fallback. A row that cannot be read is reported
    /// and cleared.
    pub(super) async fn found_in(
        &mut self,
        record: CheckpointRecord,
        waking: Option<&Message>,
    ) -> Option<Found> {
        let shared = Arc::clone(self.shared());
        let revision = record.revision;
        let mut doc = match Doc::parse(&record.data) {
            Ok(doc) => doc,
            Err(reason) => {
                self.report(BotError::CorruptCheckpoint {
                    key: self.key.clone(),
                    source: reason.into(),
                });
                self.clear_found(revision).await;
                return None;
            }
        };
        let fallback = |reason| Found::Fallback {
            name: doc.flow.clone(),
            reason,
            state: doc.state.clone(),
            revision,
        };
        if let Some(reason) = doc.stub {
            return Some(fallback(reason));
        }
        let flow = match shared.def.defs.get(&doc.flow) {
            Some(Def::Flow(f)) if !doc.ephemeral && doc.step < f.steps.len() => Arc::clone(f),
            Some(Def::Flow(f))
                if doc.ephemeral && doc.fingerprint.as_deref() == Some(&*f.fingerprint) =>
            {
                Arc::clone(f)
            }
            // A forwarded flow this replica runs differently (or not at all): a rolling deploy.
            _ if doc.ephemeral => return Some(fallback(FallbackReason::Changed)),
            found => {
                let reason = match found {
                    Some(Def::Flow(_)) => format!("flow {:?} has no step {}", doc.flow, doc.step),
                    _ => format!("no flow named {:?}", doc.flow),
                };
                self.report(BotError::CorruptCheckpoint {
                    key: self.key.clone(),
                    source: reason.into(),
                });
                self.clear_found(revision).await;
                return None;
            }
        };
        let answers = doc.take_answers();
        // Answers are replayed only into the flow that recorded them, and only all of them.
        let same_flow =
            doc.fingerprint.as_deref().is_none_or(|recorded| recorded == &*flow.fingerprint);
        let mut faithful = same_flow && !doc.unrecorded;
        let mut replay = Vec::with_capacity(answers.len());
        for recorded in answers {
            if !faithful {
                break;
            }
            match self.recorded_answer(&recorded).await {
                Some(answer) => replay.push((answer, recorded)),
                None => faithful = false,
            }
        }
        let (replay, parked_on, kept) =
            if !faithful || (doc.question.is_none() && replay.is_empty()) {
                // The guide's rule: the step runs again from its start and asks its first question.
                (Vec::new(), None, None)
            } else {
                // The waking message answers the wait after the recorded answers, unless it is one
                // of them, replayed.
                let replayed = |msg: &&Message| replay.iter().any(|(a, _)| a.id() == msg.id());
                let kept = waking.filter(|msg| !replayed(msg)).cloned();
                (replay, doc.question, kept)
            };
        let resume = Resume {
            step: doc.step,
            state: doc.state,
            replay,
            parked_on,
            input: doc.input,
            kept,
            ephemeral: doc.ephemeral,
        };
        Some(Found::Resume { def: Def::Flow(flow), resume: Box::new(resume), revision })
    }
}
