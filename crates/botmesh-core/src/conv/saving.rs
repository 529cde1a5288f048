//! What a conversation writes to the store as it goes: a checkpoint at every step and every
//! wait (persistent or ephemeral), or a stub for the hand-over fallback, each write fenced by
//! the chat's turn like a send.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{CasOutcome, CheckpointWrite, Error, LeaseLostReason};

use super::ConvCtx;
use crate::checkpoint::{self, Doc, RecordedAnswer};
use crate::durable::journal_id;
use crate::{BotError, FallbackReason, Message, Result};

/// What a conversation writes to the store as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Saving {
    /// Nothing but, with a fallback, a stub at its first wait.
    Off,
    /// A checkpoint at every step, kept until the flow ends. The fingerprint tells a replica
    /// running a changed flow not to replay the step's answers.
    Persistent { fingerprint: Arc<str> },
    /// A checkpoint at every step that expires, carrying the flow's fingerprint.
    Ephemeral { fingerprint: Arc<str> },
}

impl ConvCtx {
    pub(super) async fn park_checkpoint(&self, question: u32) -> Result<()> {
        self.write_checkpoint(Some(question)).await
    }

    /// Records `answer` as the current step's next answer; `false` when it cannot be (too
    /// large to embed without durability).
    pub(super) fn record_answer(&self, answer: &Message) -> bool {
        let shared = &self.inner.shared;
        let recorded = if shared.durability.is_some() {
            Some(RecordedAnswer::Journaled {
                id: journal_id(&answer.inbound),
                body: answer.body.clone(),
                kind: answer.kind.clone(),
                lang: answer.lang.clone(),
            })
        } else {
            serde_json::to_vec(answer)
                .ok()
                .filter(|bytes| bytes.len() <= shared.def.handover.max_answer_bytes)
                .map(|_| RecordedAnswer::Embedded { message: Box::new(answer.clone()) })
        };
        let mut st = self.st();
        match recorded {
            Some(recorded) => {
                st.answers.push(recorded);
                true
            }
            None => {
                st.unrecorded = true;
                false
            }
        }
    }

    pub(super) async fn write_checkpoint(&self, question: Option<u32>) -> Result<()> {
        let doc = {
            let st = self.st();
            let Some((step, start)) = st.step.as_ref() else { return Ok(()) };
            let (ephemeral, fingerprint) = match &st.saving {
                Saving::Off => return Ok(()),
                Saving::Persistent { fingerprint } => (false, Some(Arc::clone(fingerprint))),
                // State that is not JSON cannot travel: leave a stub for the fallback.
                Saving::Ephemeral { .. } if !st.local.is_empty() => (true, None),
                Saving::Ephemeral { fingerprint } => (true, Some(Arc::clone(fingerprint))),
            };
            let ttl = ephemeral.then(|| self.inner.shared.def.handover.ttl_for(st.timeout));
            (fingerprint.is_some() || !ephemeral).then(|| {
                let doc = Doc {
                    v: checkpoint::VERSION,
                    flow: st.name.clone(),
                    step: *step,
                    question,
                    state: start.clone(),
                    ephemeral,
                    fingerprint,
                    stub: None,
                    input: st.step_input.clone(),
                    answers: st.answers.clone(),
                    unrecorded: st.unrecorded,
                    answer: None,
                };
                (doc, ttl)
            })
        };
        let Some((doc, ttl)) = doc else { return self.write_stub(FallbackReason::NotJson).await };
        self.store_doc(&doc, ttl).await?;
        self.st().input_held = true;
        Ok(())
    }

    /// Writes a stub for the fallback, once per conversation; with the `Drop` fallback, clears
    /// whatever this conversation wrote before instead.
    async fn write_stub(&self, reason: FallbackReason) -> Result<()> {
        if self.inner.shared.def.handover.fallback.is_drop() {
            return self.clear_checkpoint().await;
        }
        let (doc, ttl) = {
            let st = self.st();
            if st.stub_written {
                return Ok(());
            }
            let doc = Doc {
                v: checkpoint::VERSION,
                flow: st.name.clone(),
                step: st.step.as_ref().map_or(0, |(i, _)| *i),
                question: None,
                state: st.step.as_ref().map(|(_, s)| s.clone()).unwrap_or_default(),
                ephemeral: true,
                fingerprint: None,
                stub: Some(reason),
                input: None,
                answers: Vec::new(),
                unrecorded: false,
                answer: None,
            };
            (doc, self.inner.shared.def.handover.ttl_for(st.timeout))
        };
        self.store_doc(&doc, Some(ttl)).await?;
        self.st().stub_written = true;
        Ok(())
    }

    /// A conversation that cannot be carried over leaves a stub at its first wait, so that the
    /// replica taking the chat applies the fallback.
    pub(super) async fn ensure_stub(&self) -> Result<()> {
        let reason = {
            let st = self.st();
            if st.saving != Saving::Off
                || st.stub_written
                || self.inner.shared.def.handover.fallback.is_drop()
            {
                return Ok(());
            }
            if st.conversation {
                FallbackReason::Conversation
            } else {
                FallbackReason::NotForwarded
            }
        };
        self.write_stub(reason).await
    }

    /// Writes a checkpoint document, compare-and-set under coordination, fenced like a send.
    async fn store_doc(&self, doc: &Doc, ttl: Option<Duration>) -> Result<()> {
        let data = serde_json::to_string(doc).map_err(|source| BotError::StateNotJson {
            name: doc.flow.clone(),
            field: String::new(),
            source,
        })?;
        // Fenced like a send: a replica whose turn is known lost does not write.
        self.alive()?;
        self.inner.turn.check()?;
        let key = self.inner.key.as_str();
        let write = CheckpointWrite::new(data).with_ttl(ttl);
        let expected = self.st().revision;
        let rows = self.inner.shared.checkpoints();
        let written = self.inner.turn.effect(rows.write(key, &write, expected)).await?;
        let CasOutcome::Written { revision } = written else {
            let reason = LeaseLostReason::Superseded;
            return Err(Error::LeaseLost { key: key.to_owned(), reason }.into());
        };
        self.st().revision = Some(revision);
        Ok(())
    }

    /// Deletes this conversation's checkpoint, if it has one. Under coordination the delete is
    /// conditional: a newer owner's row stays.
    pub(crate) async fn clear_checkpoint(&self) -> Result<()> {
        let Some(revision) = self.st().revision else { return Ok(()) };
        self.alive()?;
        self.inner.turn.check()?;
        let rows = self.inner.shared.checkpoints();
        self.inner.turn.effect(rows.clear(self.inner.key.as_str(), revision)).await?;
        self.st().revision = None;
        Ok(())
    }

    /// Takes a checkpoint found in the store, at `revision`, as this conversation's own.
    pub(crate) fn adopt_checkpoint(&self, revision: u64) {
        self.st().revision = Some(revision);
    }
}
