//! Leaving a waiting conversation. A cancel word ends it; an interrupting trigger ends it (or
//! sets it aside, to resume once the interrupting conversation completes) and starts another
//! under the same turn. Decided after the hooks and before any conversation sees the message,
//! for the conversation in this replica's memory or the one the store holds.

use std::sync::Arc;

use botmesh_traits::{CasOutcome, CheckpointWrite};

use super::Worker;
use super::resume::Found;
use crate::checkpoint;
use crate::flow::Def;
use crate::texts::keys;
use crate::{BotError, EndReason, Event, Message, Result};

/// What a message does to the conversation waiting for it, besides answering it.
pub(super) enum Exit {
    /// A cancel word: the conversation ends.
    Cancel,
    /// An interrupting trigger: the conversation ends (or is set aside) and this one starts.
    Interrupt(Def),
}

impl Worker {
    /// Whether `msg` leaves the conversation waiting in memory, or else the one `found` in
    /// the store. `None` when nothing waits, or the message is for the conversation.
    pub(super) fn exit_for(&self, msg: &Message, found: Option<&Found>) -> Option<Exit> {
        let shared = self.shared();
        let waiting = match (&self.active, found) {
            (Some(active), _) => shared.def.defs.get(&active.name),
            (None, Some(Found::Resume { def, .. })) => Some(def),
            (None, Some(Found::Fallback { name, .. })) => shared.def.defs.get(name),
            (None, None) => return None,
        };
        let texts = &shared.def.texts;
        let own = waiting.map_or(&[][..], Def::cancels);
        if shared.def.cancels.iter().chain(own).any(|t| t.matches_in(msg, texts)) {
            return Some(Exit::Cancel);
        }
        shared
            .def
            .triggered
            .iter()
            .find(|d| d.interrupts() && d.triggers().iter().any(|t| t.matches_in(msg, texts)))
            .map(|d| Exit::Interrupt(d.clone()))
    }

    /// Ends the waiting conversation because the user cancelled it, and says so.
    pub(super) async fn cancel(&mut self, msg: &Message, found: Option<Found>) {
        self.leave(found, EndReason::Cancelled).await;
        let shared = Arc::clone(self.shared());
        let text = shared.def.texts.get(msg.lang.as_deref(), keys::CANCELLED);
        if text.is_empty() {
            return;
        }
        let ctx = self.ctx(msg.clone(), None);
        if let Err(e) = ctx.reply(text.to_owned()).await {
            self.report(e);
        }
    }

    /// Ends the waiting conversation, or sets it aside when it asked for it, and starts `def`
    /// with `msg`.
    pub(super) async fn interrupt(&mut self, msg: Message, found: Option<Found>, def: Def) {
        let waiting = match (&self.active, &found) {
            (Some(active), _) => self.shared().def.defs.get(&active.name).cloned(),
            (None, Some(Found::Resume { def, .. })) => Some(def.clone()),
            _ => None,
        };
        if waiting.is_some_and(|w| w.resumes() && w.name() != def.name())
            && let Err(e) = self.set_aside().await
        {
            // Not set aside: the waiting flow ends like any interrupted one.
            self.report(e);
        }
        self.leave(found, EndReason::Interrupted).await;
        self.install(def, msg, None);
        self.drive().await;
    }

    /// Ends the conversation waiting in memory, or the one only the store holds (its row is
    /// cleared with a compare-and-set, as any end clears it).
    async fn leave(&mut self, found: Option<Found>, reason: EndReason) {
        if let Some(active) = self.active.take() {
            return self.end(active, reason).await;
        }
        let (name, revision) = match found {
            Some(Found::Resume { def, revision, .. }) => (def.name().to_owned(), revision),
            Some(Found::Fallback { name, revision, .. }) => (name, revision),
            None => return,
        };
        self.clear_found(revision).await;
        self.discard_aside(reason).await;
        let key = self.key.clone();
        self.shared().events.emit(Event::ConversationEnded { key, name, reason });
    }

    /// Copies the chat's checkpoint row to the side, for [`Worker::resume_aside`].
    async fn set_aside(&mut self) -> Result<()> {
        let shared = Arc::clone(self.shared());
        let rows = shared.checkpoints();
        let Some(row) = rows.read(self.key.as_str()).await? else { return Ok(()) };
        let aside = checkpoint::aside(self.key.as_str());
        let write = CheckpointWrite::new(row.data);
        self.turn.check()?;
        let written = self
            .turn
            .effect(async {
                // Over whatever row is set aside already: one flow is set aside at a time.
                let current = if rows.cas.is_some() {
                    rows.read(&aside).await?.map(|r| r.revision)
                } else {
                    None
                };
                rows.write(&aside, &write, current).await.map(drop)
            })
            .await;
        Ok(written?)
    }

    /// After a conversation completed: resumes the flow it interrupted, if one was set aside.
    /// The row goes back to the chat's checkpoint and the flow continues where it waited,
    /// asking its question again. Returns whether a flow was installed.
    pub(super) async fn resume_aside(&mut self, msg: Message) -> bool {
        match self.take_aside().await {
            Ok(Some(found)) => {
                if let Found::Resume { def, resume, revision } = found {
                    self.install(def, msg, Some((*resume, revision)));
                    return true;
                }
                false
            }
            Ok(None) => false,
            Err(e) => {
                self.report(e);
                false
            }
        }
    }

    /// Moves the set-aside row back to the chat's checkpoint and reads it.
    async fn take_aside(&mut self) -> Result<Option<Found>> {
        let shared = Arc::clone(self.shared());
        if !shared.def.has_resumable {
            return Ok(None);
        }
        let (rows, key) = (shared.checkpoints(), self.key.as_str());
        let aside = checkpoint::aside(key);
        let Some(row) = rows.read(&aside).await? else { return Ok(None) };
        self.turn.check()?;
        let write = CheckpointWrite::new(row.data.clone());
        let revision = self
            .turn
            .effect(async {
                // The interrupting flow cleared its row as it completed.
                let revision = match rows.write(key, &write, None).await? {
                    CasOutcome::Written { revision } => Some(revision),
                    _ => None,
                };
                rows.clear(&aside, row.revision).await?;
                Ok::<_, BotError>(revision)
            })
            .await?;
        let Some(revision) = revision else {
            // Someone else's conversation holds the chat's row now: the flow set aside is gone.
            return Ok(None);
        };
        let record = botmesh_traits::CheckpointRecord::new(row.data, revision);
        Ok(self.found_in(record, None).await)
    }

    /// Forgets a flow set aside when the conversation that interrupted it ended without
    /// completing (cancelled, timed out, idle, failed): it is not to come back.
    pub(super) async fn discard_aside(&mut self, reason: EndReason) {
        let shared = Arc::clone(self.shared());
        let gives_up = matches!(
            reason,
            EndReason::Cancelled | EndReason::Timeout | EndReason::Idle | EndReason::Failed
        );
        if !shared.def.has_resumable || !gives_up || self.turn.check().is_err() {
            return;
        }
        let aside = checkpoint::aside(self.key.as_str());
        let rows = shared.checkpoints();
        let discarded = async {
            match rows.read(&aside).await? {
                Some(row) => rows.clear(&aside, row.revision).await,
                None => Ok(()),
            }
        };
        if let Err(e) = self.turn.effect(discarded).await {
            self.report(e.into());
        }
    }
}
