//! The context conversations and `do` steps run with, and the rendezvous through which a
//! waiting conversation receives its next message.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use botmesh_traits::{
    CasOutcome, ChatId, ChatKey, CheckpointWrite, Error, LeaseLostReason, Outbound, OutboundContent,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::bot::Shared;
use crate::coordination::TurnSlot;
use crate::{BotError, Message, Result, Step};

/// What a waiting conversation is woken with.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one input per wake-up, moved once; boxing would allocate per message"
)]
pub(crate) enum Input {
    Message(Message),
    Idle(Duration),
}

/// How a parked conversation waits: the timers the chat worker arms for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Park {
    pub(crate) timeout: Option<Duration>,
    pub(crate) idle: Option<Duration>,
}

/// The rendezvous between a chat worker and the conversation future it drives.
///
/// The worker polls the conversation's future itself. When the conversation awaits its next
/// message and none is there, [`Wait`] records that it is parked; the worker sees that after
/// the poll and treats the conversation as waiting again, which ends the message's turn.
#[derive(Debug, Default)]
pub(crate) struct Link {
    st: Mutex<LinkState>,
}

#[derive(Debug, Default)]
struct LinkState {
    inbox: Option<Input>,
    parked: Option<Park>,
    waker: Option<Waker>,
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, LinkState> {
        // The critical sections below run no user code and cannot panic.
        self.st.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn deliver(&self, input: Input) {
        let mut st = self.lock();
        st.inbox = Some(input);
        st.parked = None;
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    pub(crate) fn parked(&self) -> Option<Park> {
        self.lock().parked
    }

    fn wait(&self, park: Park) -> Wait<'_> {
        Wait { link: self, park }
    }
}

struct Wait<'a> {
    link: &'a Link,
    park: Park,
}

impl Future for Wait<'_> {
    type Output = Input;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Input> {
        let mut st = self.link.lock();
        if let Some(input) = st.inbox.take() {
            return Poll::Ready(input);
        }
        st.parked = Some(self.park);
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The checkpoint document a persistent flow writes. Stores keep it as opaque JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckpointDoc {
    /// Format version.
    pub(crate) v: u32,
    /// The flow.
    pub(crate) flow: String,
    /// The step the flow is in.
    pub(crate) step: usize,
    /// The question of that step the flow is parked on; `None` while the step runs.
    pub(crate) question: Option<u32>,
    /// The flow's state as it was when the step started.
    pub(crate) state: Map<String, Value>,
}

pub(crate) const CHECKPOINT_VERSION: u32 = 1;

/// The context of a running conversation or flow: what the spec calls `c`.
///
/// Cheap to clone; every clone refers to the same conversation.
#[derive(Clone)]
pub struct ConvCtx {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConvCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConvCtx").field("key", &self.inner.key).finish_non_exhaustive()
    }
}

struct Inner {
    shared: Arc<Shared>,
    key: ChatKey,
    chat: ChatId,
    link: Arc<Link>,
    turn: Arc<TurnSlot>,
    /// Set when the conversation ended: clones kept elsewhere may no longer act for it.
    ended: std::sync::atomic::AtomicBool,
    st: Mutex<ConvState>,
}

struct ConvState {
    name: String,
    state: Map<String, Value>,
    message: Message,
    lang: Option<String>,
    /// An answer to feed to the step's first question instead of asking it.
    preset: Option<Message>,
    /// Questions asked in the current step.
    questions: u32,
    /// The current step and the state as it was when the step started.
    step: Option<(usize, Map<String, Value>)>,
    idle: Option<Duration>,
    timeout: Option<Duration>,
    persistent: bool,
    /// The revision of the checkpoint this conversation last wrote or resumed from; `None`
    /// when it has none in the store.
    revision: Option<u64>,
    /// The current step is a `do` step (it may go on working after its first answer).
    in_do: bool,
}

impl ConvCtx {
    pub(crate) fn new(
        shared: Arc<Shared>,
        link: Arc<Link>,
        turn: Arc<TurnSlot>,
        message: Message,
        name: String,
        timeout: Option<Duration>,
    ) -> Self {
        let st = ConvState {
            name,
            state: Map::new(),
            lang: message.lang.clone(),
            message: message.clone(),
            preset: None,
            questions: 0,
            step: None,
            idle: None,
            timeout,
            persistent: false,
            revision: None,
            in_do: false,
        };
        Self {
            inner: Arc::new(Inner {
                shared,
                key: message.key(),
                chat: message.chat().clone(),
                link,
                turn,
                ended: std::sync::atomic::AtomicBool::new(false),
                st: Mutex::new(st),
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, ConvState> {
        // No user code runs under this lock.
        self.inner.st.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The chat key this conversation belongs to.
    pub fn key(&self) -> &ChatKey {
        &self.inner.key
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        &self.inner.chat
    }

    /// The name of the running flow or conversation.
    pub fn name(&self) -> String {
        self.st().name.clone()
    }

    /// The latest message: the one that started the conversation, or the last answer.
    pub fn message(&self) -> Message {
        self.st().message.clone()
    }

    /// The conversation's language: the latest message's, else the bot's default.
    pub fn lang(&self) -> Option<String> {
        self.st().lang.clone()
    }

    /// A field of the state, if it is there and has type `T`.
    pub fn get<T: DeserializeOwned>(&self, field: &str) -> Option<T> {
        let v = self.st().state.get(field).cloned()?;
        serde_json::from_value(v).ok()
    }

    /// Sets a field of the state. The value must serialize to plain JSON; otherwise the state is
    /// left unchanged and [`BotError::StateNotJson`] says which field failed.
    pub fn set<T: Serialize>(&self, field: &str, value: T) -> Result<()> {
        let v = serde_json::to_value(value).map_err(|source| BotError::StateNotJson {
            name: self.name(),
            field: field.to_owned(),
            source,
        })?;
        self.st().state.insert(field.to_owned(), v);
        Ok(())
    }

    /// Removes a field of the state.
    pub fn remove(&self, field: &str) -> Option<Value> {
        self.st().state.remove(field)
    }

    /// A copy of the whole state.
    pub fn state(&self) -> Map<String, Value> {
        self.st().state.clone()
    }

    /// A built-in or overridden text in the conversation's language.
    pub fn text(&self, key: &str) -> String {
        let lang = self.lang();
        self.inner.shared.texts.get(lang.as_deref(), key).to_owned()
    }

    /// Sends a text to the chat. A clone of the context kept after the conversation ended (a
    /// reminder sent by a background task) may still send; such a send is not fenced by a turn.
    pub async fn send(&self, text: impl Into<String>) -> Result<()> {
        self.send_content(OutboundContent::Text { body: text.into() }).await
    }

    /// Sends any content to the chat.
    pub async fn send_content(&self, content: OutboundContent) -> Result<()> {
        let message = Outbound::new(self.inner.chat.clone(), content);
        self.inner.shared.send_fenced(&self.inner.turn, &message).await.map(|_| ())
    }

    /// Pauses the conversation. The chat's turn stays held meanwhile.
    pub async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    /// Arms the idle watchdog: from now on, a wait that sees no message for `after` returns
    /// [`BotError::Idle`], so the code can nudge the user or give up. `None` disarms it.
    pub fn idle(&self, after: impl Into<Option<Duration>>) {
        self.st().idle = after.into();
    }

    /// Ends this flow and starts `name` under the same turn: `return Ok(c.goto("menu"))`.
    pub fn goto(&self, name: impl Into<String>) -> Step {
        Step::Goto(name.into())
    }

    /// Sends `prompt` and waits for the answer.
    ///
    /// In a persistent flow the checkpoint records that the flow is parked on this question
    /// before it waits. When a resumed flow was parked on its step's first question, the
    /// message that woke it is returned here at once, without asking again.
    pub async fn ask(&self, prompt: impl Into<String>) -> Result<Message> {
        let (question, preset) = {
            let mut st = self.st();
            let q = st.questions;
            st.questions += 1;
            (q, if q == 0 { st.preset.take() } else { None })
        };
        let answer = match preset {
            Some(answer) => {
                self.st().message = answer.clone();
                answer
            }
            None => {
                self.send(prompt).await?;
                self.park_checkpoint(question).await?;
                self.wait().await?
            }
        };
        if question == 0 && self.st().in_do {
            // The step goes on past its first question: the checkpoint must stop saying it
            // waits for that answer, or a cut-short step would take the next message for it.
            self.write_checkpoint(None).await?;
        }
        Ok(answer)
    }

    /// Waits for the user's next message without sending anything. Fails with
    /// [`BotError::ConversationClosed`] once the conversation ended (for a clone of the context
    /// kept by a background task).
    pub async fn wait(&self) -> Result<Message> {
        self.alive()?;
        let park = {
            let st = self.st();
            Park { timeout: st.timeout, idle: st.idle }
        };
        match self.inner.link.wait(park).await {
            Input::Message(m) => {
                let mut st = self.st();
                if m.lang.is_some() {
                    st.lang.clone_from(&m.lang);
                }
                st.message = m.clone();
                Ok(m)
            }
            Input::Idle(after) => Err(BotError::Idle { after }),
        }
    }

    /// Reads the data kept for this user (`ctx.user`), an empty object when there is none.
    pub async fn user(&self) -> Result<Value> {
        self.inner.shared.user_data(self.inner.key.as_str()).await
    }

    /// Replaces the data kept for this user.
    pub async fn set_user<T: Serialize>(&self, data: &T) -> Result<()> {
        self.inner.shared.set_user_data(self.inner.key.as_str(), data).await
    }

    // ---- used by the flow runner and the chat worker ----

    pub(crate) fn begin_flow(
        &self,
        name: &str,
        persistent: bool,
        timeout: Option<Duration>,
        state: Map<String, Value>,
    ) {
        let mut st = self.st();
        name.clone_into(&mut st.name);
        st.persistent = persistent;
        st.timeout = timeout;
        st.state = state;
        st.step = None;
    }

    pub(crate) fn set_preset(&self, answer: Option<Message>) {
        self.st().preset = answer;
    }

    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.inner.link
    }

    /// Enters step `index`: remembers the state to restart it from, and checkpoints it. A
    /// step resumed with its first answer in hand keeps the stored checkpoint (which says
    /// exactly that) until the answer is taken.
    pub(crate) async fn begin_step(&self, index: usize, is_do: bool) -> Result<()> {
        let resumed_with_answer = {
            let mut st = self.st();
            st.questions = 0;
            st.in_do = is_do;
            let start = st.state.clone();
            st.step = Some((index, start));
            st.preset.is_some()
        };
        if resumed_with_answer {
            return Ok(());
        }
        self.write_checkpoint(None).await
    }

    /// Refuses to act for a conversation that ended.
    fn alive(&self) -> Result<()> {
        if self.inner.ended.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(BotError::ConversationClosed);
        }
        Ok(())
    }

    pub(crate) fn mark_ended(&self) {
        self.inner.ended.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    async fn park_checkpoint(&self, question: u32) -> Result<()> {
        self.write_checkpoint(Some(question)).await
    }

    async fn write_checkpoint(&self, question: Option<u32>) -> Result<()> {
        let doc = {
            let st = self.st();
            let Some((step, start)) = st.step.as_ref().filter(|_| st.persistent) else {
                return Ok(());
            };
            CheckpointDoc {
                v: CHECKPOINT_VERSION,
                flow: st.name.clone(),
                step: *step,
                question,
                state: start.clone(),
            }
        };
        let data = serde_json::to_string(&doc).map_err(|source| BotError::StateNotJson {
            name: doc.flow.clone(),
            field: String::new(),
            source,
        })?;
        // Fenced like a send: a replica whose turn is known lost does not write.
        self.alive()?;
        self.inner.turn.check()?;
        let store = &self.inner.shared.store;
        let key = self.inner.key.as_str();
        let write = CheckpointWrite::new(data);
        let revision = if self.inner.shared.cas_checkpoints {
            let expected = self.st().revision;
            match store.set_checkpoint_if(key, &write, expected).await? {
                CasOutcome::Written { revision } => revision,
                _ => {
                    return Err(Error::LeaseLost {
                        key: key.to_owned(),
                        reason: LeaseLostReason::Superseded,
                    }
                    .into());
                }
            }
        } else {
            store.set_checkpoint(key, &write).await?
        };
        self.st().revision = Some(revision);
        Ok(())
    }

    /// Deletes this conversation's checkpoint, if it has one. Under coordination the delete is
    /// conditional: a newer owner's row stays.
    pub(crate) async fn clear_checkpoint(&self) -> Result<()> {
        let Some(revision) = self.st().revision else { return Ok(()) };
        self.inner.turn.check()?;
        let store = &self.inner.shared.store;
        if self.inner.shared.cas_checkpoints {
            store.clear_checkpoint_if(self.inner.key.as_str(), revision).await?;
        } else {
            store.clear_checkpoint(self.inner.key.as_str()).await?;
        }
        self.st().revision = None;
        Ok(())
    }

    /// Takes a checkpoint found in the store, at `revision`, as this conversation's own.
    pub(crate) fn adopt_checkpoint(&self, revision: u64) {
        self.st().revision = Some(revision);
    }
}
