//! The checkpoint: the one document a chat's conversation leaves in the store so that another
//! process (or this one, later) continues it. This module owns its format and version, the
//! keys of its rows, and how a row is read, written and cleared: compare-and-set under
//! coordination when the store can, plain otherwise. Stores keep the document as opaque JSON.

use std::sync::Arc;

use botmesh_traits::{CasOutcome, CasStore, CheckpointRecord, CheckpointWrite, Error, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::{FallbackReason, Message};

/// The version written into every document; a row of another version is not read.
pub(crate) const VERSION: u32 = 1;

/// The checkpoint document a flow writes at each step and each wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Doc {
    /// Format version.
    pub(crate) v: u32,
    /// The flow.
    pub(crate) flow: String,
    /// The step the flow is in.
    pub(crate) step: usize,
    /// The question of that step the flow is parked on; `None` while the step runs.
    pub(crate) question: Option<u32>,
    /// With durability, the journal id of the message the step began under: its sends before
    /// its first wait keep their outbox keys when the step runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<String>,
    /// The flow's state as it was when the step started.
    pub(crate) state: Map<String, Value>,
    /// Written for a flow without `.persistent()` because flows are forwarded: it expires,
    /// and it only resumes under the same fingerprint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) ephemeral: bool,
    /// The flow's fingerprint, for ephemeral checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fingerprint: Option<Arc<str>>,
    /// Set for a stub: the conversation cannot be resumed, only handed to the fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stub: Option<FallbackReason>,
    /// Every message a `do` step consumed so far, in order: replayed to its waits when the
    /// step runs again elsewhere, so each answer lands on the question it answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) answers: Vec<RecordedAnswer>,
    /// An answer of the step could not be recorded (too large to embed without durability):
    /// the step cannot be replayed, it runs again from its start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unrecorded: bool,
    /// The step's first answer alone, as checkpoints written before `answers` existed hold it.
    #[serde(default, skip_serializing)]
    pub(crate) answer: Option<RecordedAnswer>,
}

impl Doc {
    /// Reads a row's document: `Err` says why it cannot be read (not the format, or another
    /// version).
    pub(crate) fn parse(data: &str) -> Result<Self, String> {
        let doc = serde_json::from_str::<Self>(data).map_err(|e| e.to_string())?;
        if doc.v != VERSION {
            return Err(format!("unknown checkpoint version {}", doc.v));
        }
        Ok(doc)
    }

    /// The answers the step consumed, from either form of the document.
    pub(crate) fn take_answers(&mut self) -> Vec<RecordedAnswer> {
        let mut answers = std::mem::take(&mut self.answers);
        if answers.is_empty() {
            answers.extend(self.answer.take());
        }
        answers
    }
}

/// An answer as a checkpoint keeps it: the whole message, or (with durability) a
/// pointer into the inbox journal plus what the `before_message` hooks made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub(crate) enum RecordedAnswer {
    Embedded { message: Box<Message> },
    Journaled { id: String, body: String, kind: String, lang: Option<String> },
}

/// The key of the row a chat's flow is set aside in while another one interrupts it.
pub(crate) fn aside(key: &str) -> String {
    format!("{key}|aside")
}

/// The checkpoint rows of a store, written the way the bot is set up: compare-and-set (`cas`,
/// the store's [`CasStore`]) when coordination is on and the store can, plainly otherwise.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) cas: Option<&'a dyn CasStore>,
}

impl Rows<'_> {
    /// Row `key`, if there is one.
    pub(crate) async fn read(self, key: &str) -> Result<Option<CheckpointRecord>, Error> {
        self.store.get_checkpoint(key).await
    }

    /// Writes row `key` over the revision `expected` this writer last saw (`None`: no row).
    /// Without compare-and-set the write is unconditional and always lands.
    pub(crate) async fn write(
        self,
        key: &str,
        write: &CheckpointWrite,
        expected: Option<u64>,
    ) -> Result<CasOutcome, Error> {
        let span = tracing::debug_span!(target: "botmesh", "checkpoint", expected);
        async {
            if let Some(cas) = self.cas {
                cas.set_checkpoint_if(key, write, expected).await
            } else {
                let revision = self.store.set_checkpoint(key, write).await?;
                Ok(CasOutcome::Written { revision })
            }
        }
        .instrument(span)
        .await
    }

    /// Deletes row `key` as of `revision`: with compare-and-set, a newer writer's row stays.
    pub(crate) async fn clear(self, key: &str, revision: u64) -> Result<(), Error> {
        if let Some(cas) = self.cas {
            cas.clear_checkpoint_if(key, revision).await.map(drop)
        } else {
            self.store.clear_checkpoint(key).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(v: u32) -> Doc {
        Doc {
            v,
            flow: "order".into(),
            step: 2,
            question: Some(1),
            input: None,
            state: Map::new(),
            ephemeral: false,
            fingerprint: None,
            stub: None,
            answers: Vec::new(),
            unrecorded: false,
            answer: None,
        }
    }

    #[test]
    fn a_document_reads_back_as_written_and_another_version_is_refused() {
        let written = serde_json::to_string(&doc(VERSION)).unwrap();
        assert_eq!(Doc::parse(&written), Ok(doc(VERSION)));
        let newer = serde_json::to_string(&doc(VERSION + 1)).unwrap();
        assert!(Doc::parse(&newer).unwrap_err().contains("version"));
        assert!(Doc::parse("{not json").is_err());
    }

    #[test]
    fn a_document_of_the_older_form_gives_its_single_answer() {
        let answer = RecordedAnswer::Journaled {
            id: "j1".into(),
            body: "yes".into(),
            kind: "text".into(),
            lang: None,
        };
        let mut old = doc(VERSION);
        old.answer = Some(answer.clone());
        assert_eq!(old.take_answers(), [answer]);
    }
}
