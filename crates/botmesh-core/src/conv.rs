//! The context conversations and `do` steps run with, and the rendezvous through which a
//! waiting conversation receives its next message.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
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

use crate::coordination::TurnSlot;
use crate::durable::journal_id;
use crate::shared::Shared;
use crate::{BotError, FallbackReason, Message, Result, Step};

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

    /// Whether a message is already waiting to be taken (one kept from a hand-over).
    fn has_message(&self) -> bool {
        matches!(self.lock().inbox, Some(Input::Message(_)))
    }

    /// Takes a message nobody took (the conversation ended before its next wait).
    pub(crate) fn take_message(&self) -> Option<Message> {
        let mut st = self.lock();
        match st.inbox.take() {
            Some(Input::Message(m)) => Some(m),
            other => {
                st.inbox = other;
                None
            }
        }
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

impl CheckpointDoc {
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

pub(crate) const CHECKPOINT_VERSION: u32 = 1;

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
    /// Answers a resumed step consumed before it was interrupted, fed back to its waits in
    /// order instead of asking again.
    replay: VecDeque<(Message, RecordedAnswer)>,
    /// The question the resumed step was parked on: the wait the replay must reach.
    parked_on: Option<u32>,
    /// The next step begins where a checkpoint left it: the stored checkpoint stays until
    /// the step records something new.
    resuming: bool,
    /// Questions asked in the current step.
    questions: u32,
    /// The current step and the state as it was when the step started.
    step: Option<(usize, Map<String, Value>)>,
    idle: Option<Duration>,
    timeout: Option<Duration>,
    /// The revision of the checkpoint this conversation last wrote or resumed from; `None`
    /// when it has none in the store.
    revision: Option<u64>,
    /// The current step is a `do` step (it may go on working after its first answer).
    in_do: bool,
    /// What this conversation writes to the store.
    saving: Saving,
    /// A free-form conversation (as opposed to a flow).
    conversation: bool,
    /// State that is not JSON: kept in memory only.
    local: HashMap<String, Arc<dyn Any + Send + Sync>>,
    /// The stub is in the store.
    stub_written: bool,
    /// The messages the current `do` step consumed, recorded in its checkpoints.
    answers: Vec<RecordedAnswer>,
    /// One of them could not be recorded.
    unrecorded: bool,
    /// With durability: the journal id of the message being handled, for outbox keys.
    input: Option<String>,
    /// With durability: the journal id of the message the current step began under.
    step_input: Option<String>,
    /// A checkpoint that landed after the current message holds its effect.
    input_held: bool,
    /// Sends since the current message or step began, for outbox keys.
    send_seq: u32,
}

impl ConvState {
    /// Makes `m` the message being handled: the latest message, its language, and (with
    /// durability) the input its sends are keyed by, numbered from zero for a new one.
    fn took(&mut self, m: &Message, durable: bool) {
        if m.lang.is_some() {
            self.lang.clone_from(&m.lang);
        }
        self.message = m.clone();
        let input = durable.then(|| journal_id(&m.inbound));
        if input != self.input {
            self.input = input;
            self.send_seq = 0;
        }
    }
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
            replay: VecDeque::new(),
            parked_on: None,
            resuming: false,
            questions: 0,
            step: None,
            idle: None,
            timeout,
            revision: None,
            in_do: false,
            saving: Saving::Off,
            conversation: false,
            local: HashMap::new(),
            stub_written: false,
            answers: Vec::new(),
            unrecorded: false,
            input: shared.durability.is_some().then(|| journal_id(&message.inbound)),
            step_input: None,
            input_held: false,
            send_seq: 0,
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

    /// The fence of the chat's turn the conversation runs under now (see
    /// [`Ctx::fence`](crate::Ctx::fence)); it changes when an answer arrives under a new turn.
    /// `None` without coordination.
    pub fn fence(&self) -> Option<u64> {
        self.inner.turn.fence()
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

    /// Keeps a value that is not JSON (a client, a handle, a closure) for the rest of the
    /// conversation, in this process's memory only.
    ///
    /// A forwarded flow holding such a value cannot be carried to another replica: it goes to
    /// the fallback there (reason [`FallbackReason::NotJson`]). A `.persistent()` flow
    /// resumed elsewhere starts without it.
    pub fn set_local<T: Any + Send + Sync>(&self, field: &str, value: T) {
        self.st().local.insert(field.to_owned(), Arc::new(value));
    }

    /// A value kept with [`ConvCtx::set_local`], if it is there and has type `T`.
    pub fn local<T: Any + Send + Sync>(&self, field: &str) -> Option<Arc<T>> {
        let v = Arc::clone(self.st().local.get(field)?);
        v.downcast::<T>().ok()
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
    ///
    /// With durability, a send made again by a step that runs again for the same message
    /// (on another replica after a crash) is recorded in the outbox and skipped.
    pub async fn send_content(&self, content: OutboundContent) -> Result<()> {
        let message = Outbound::new(self.inner.chat.clone(), content);
        let outbox = {
            let mut st = self.st();
            let seq = st.send_seq;
            st.send_seq += 1;
            let step = st.step.as_ref().map_or(0, |(i, _)| *i);
            st.input
                .as_ref()
                .map(|input| format!("{}|{input}|{}|{step}|{seq}", self.inner.key, st.name))
        };
        self.inner.shared.send_once(&self.inner.turn, &message, outbox).await.map(|_| ())
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
    /// Fails with [`BotError::ConversationClosed`], sending nothing, once the conversation
    /// ended. In a persistent flow the checkpoint records that the flow is parked on this
    /// question before it waits. When a resumed flow was parked on this question, the message that woke
    /// it is returned here at once, without asking again; a `do` step resumed after it
    /// consumed answers gets those answers back, in order, from its earlier questions.
    pub async fn ask(&self, prompt: impl Into<String>) -> Result<Message> {
        // Nobody can answer a conversation that ended: its prompt is not sent.
        self.alive()?;
        let question = {
            let mut st = self.st();
            st.questions += 1;
            st.questions - 1
        };
        if let Some(answer) = self.replayed(Some(question))? {
            return Ok(answer);
        }
        // A message kept from a hand-over answers this question without asking it.
        if !self.inner.link.has_message() {
            self.send(prompt).await?;
            self.park_checkpoint(question).await?;
        }
        self.next_input().await
    }

    /// Waits for the user's next message without sending anything. Fails with
    /// [`BotError::ConversationClosed`] once the conversation ended (for a clone of the context
    /// kept by a background task).
    pub async fn wait(&self) -> Result<Message> {
        self.alive()?;
        if let Some(answer) = self.replayed(None)? {
            return Ok(answer);
        }
        self.next_input().await
    }

    /// The next recorded answer of a resumed step, if it has one left. Once they are all
    /// fed, the wait after them must be the question the step was parked on: a step that
    /// asks something else now (its code changed) fails with [`BotError::ReplayDiverged`],
    /// and runs again from its start.
    fn replayed(&self, question: Option<u32>) -> Result<Option<Message>> {
        let mut st = self.st();
        if let Some((answer, recorded)) = st.replay.pop_front() {
            st.took(&answer, self.inner.shared.durability.is_some());
            // The step's record is rebuilt as it replays, so its next write keeps it.
            st.answers.push(recorded);
            return Ok(Some(answer));
        }
        match st.parked_on.take() {
            Some(parked) if question != Some(parked) => Err(BotError::ReplayDiverged {
                name: st.name.clone(),
                step: st.step.as_ref().map_or(0, |(i, _)| *i),
            }),
            _ => Ok(None),
        }
    }

    /// Waits for the conversation's next input. In a `do` step the answer is recorded in the
    /// checkpoint before the step goes on, so that a replica taking over a step cut short
    /// feeds it back instead of asking again (and does not take the next message for it).
    async fn next_input(&self) -> Result<Message> {
        self.ensure_stub().await?;
        let park = {
            let st = self.st();
            Park { timeout: st.timeout, idle: st.idle }
        };
        match self.inner.link.wait(park).await {
            Input::Message(m) => {
                let in_do = {
                    let mut st = self.st();
                    st.took(&m, self.inner.shared.durability.is_some());
                    st.input_held = false;
                    st.in_do
                };
                if in_do {
                    let recorded = self.record_answer(&m);
                    self.write_checkpoint(None).await?;
                    if !recorded {
                        // Too large to embed: no checkpoint holds it.
                        self.st().input_held = false;
                    }
                }
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
        saving: Saving,
        timeout: Option<Duration>,
        state: Map<String, Value>,
    ) {
        let mut st = self.st();
        name.clone_into(&mut st.name);
        st.saving = saving;
        st.timeout = timeout;
        st.state = state;
        st.step = None;
    }

    /// Marks this context as a free-form conversation's.
    pub(crate) fn begin_conversation(&self, name: &str, timeout: Option<Duration>) {
        self.begin_flow(name, Saving::Off, timeout, Map::new());
        self.st().conversation = true;
    }

    /// Whether the message being handled is safe to acknowledge: nothing of it lives only in
    /// this process's memory, or a checkpoint written after it holds its effect.
    pub(crate) fn holds_input(&self) -> bool {
        let st = self.st();
        st.saving == Saving::Off || st.input_held
    }

    /// Resumes the flow's next step where a checkpoint left it: `replay` are the answers it
    /// consumed (fed back to its waits in order), `parked_on` the question it waited on, and
    /// `input` the message it began under.
    pub(crate) fn resume_step(
        &self,
        replay: Vec<(Message, RecordedAnswer)>,
        parked_on: Option<u32>,
        input: Option<String>,
    ) {
        let mut st = self.st();
        st.replay = replay.into();
        st.parked_on = parked_on;
        st.resuming = true;
        if input.is_some() {
            st.input = input;
        }
    }

    /// Whether a resumed step used up what it was resumed with: every recorded answer, and
    /// the wait it was parked on.
    pub(crate) fn replay_done(&self) -> bool {
        let st = self.st();
        st.replay.is_empty() && st.parked_on.is_none()
    }

    /// Drops what a resumed step was resumed with, so that it runs again from its start and
    /// asks its first question; the message that woke it is not taken for an answer.
    pub(crate) fn restart_step(&self) {
        self.abandon_replay();
        {
            let mut st = self.st();
            st.resuming = false;
            if let Some((_, start)) = &st.step {
                st.state = start.clone();
            }
        }
        drop(self.inner.link.take_message());
    }

    /// Forgets the recorded answers a resumed step did not use.
    pub(crate) fn abandon_replay(&self) {
        let mut st = self.st();
        st.replay.clear();
        st.parked_on = None;
    }

    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.inner.link
    }

    /// Enters step `index`: remembers the state to restart it from, and checkpoints it. A
    /// resumed step keeps the stored checkpoint (which says where it was) until it records
    /// something new.
    pub(crate) async fn begin_step(&self, index: usize, is_do: bool) -> Result<()> {
        let resuming = {
            let mut st = self.st();
            st.questions = 0;
            st.in_do = is_do;
            st.send_seq = 0;
            st.answers.clear();
            st.unrecorded = false;
            st.step_input = st.input.clone();
            let start = st.state.clone();
            st.step = Some((index, start));
            std::mem::take(&mut st.resuming)
        };
        if resuming {
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

    /// Records `answer` as the current step's next answer; `false` when it cannot be (too
    /// large to embed without durability).
    fn record_answer(&self, answer: &Message) -> bool {
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
                .filter(|bytes| bytes.len() <= shared.handover.max_answer_bytes)
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

    async fn write_checkpoint(&self, question: Option<u32>) -> Result<()> {
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
            let ttl = ephemeral.then(|| self.inner.shared.handover.ttl_for(st.timeout));
            (fingerprint.is_some() || !ephemeral).then(|| {
                let doc = CheckpointDoc {
                    v: CHECKPOINT_VERSION,
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
        if self.inner.shared.handover.fallback.is_drop() {
            return self.clear_checkpoint().await;
        }
        let (doc, ttl) = {
            let st = self.st();
            if st.stub_written {
                return Ok(());
            }
            let doc = CheckpointDoc {
                v: CHECKPOINT_VERSION,
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
            (doc, self.inner.shared.handover.ttl_for(st.timeout))
        };
        self.store_doc(&doc, Some(ttl)).await?;
        self.st().stub_written = true;
        Ok(())
    }

    /// A conversation that cannot be carried over leaves a stub at its first wait, so that the
    /// replica taking the chat applies the fallback.
    async fn ensure_stub(&self) -> Result<()> {
        let reason = {
            let st = self.st();
            if st.saving != Saving::Off
                || st.stub_written
                || self.inner.shared.handover.fallback.is_drop()
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
    async fn store_doc(&self, doc: &CheckpointDoc, ttl: Option<Duration>) -> Result<()> {
        let data = serde_json::to_string(doc).map_err(|source| BotError::StateNotJson {
            name: doc.flow.clone(),
            field: String::new(),
            source,
        })?;
        // Fenced like a send: a replica whose turn is known lost does not write.
        self.alive()?;
        self.inner.turn.check()?;
        let store = &self.inner.shared.store;
        let key = self.inner.key.as_str();
        let write = CheckpointWrite::new(data).with_ttl(ttl);
        let expected = self.st().revision;
        let written = self
            .inner
            .turn
            .effect(async {
                if self.inner.shared.cas_checkpoints {
                    store.set_checkpoint_if(key, &write, expected).await
                } else {
                    let revision = store.set_checkpoint(key, &write).await?;
                    Ok(CasOutcome::Written { revision })
                }
            })
            .await?;
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
        let (store, key) = (&self.inner.shared.store, self.inner.key.as_str());
        self.inner
            .turn
            .effect(async {
                if self.inner.shared.cas_checkpoints {
                    store.clear_checkpoint_if(key, revision).await.map(drop)
                } else {
                    store.clear_checkpoint(key).await
                }
            })
            .await?;
        self.st().revision = None;
        Ok(())
    }

    /// Takes a checkpoint found in the store, at `revision`, as this conversation's own.
    pub(crate) fn adopt_checkpoint(&self, revision: u64) {
        self.st().revision = Some(revision);
    }
}
