//! The context conversations and `do` steps run with (`ConvCtx`, what the user's code sees),
//! with the rendezvous through which a waiting conversation receives its next message
//! (`link.rs`) and what it writes to the store as it goes (`saving.rs`).

mod link;
mod saving;

pub(crate) use link::{Input, Link, Park};
pub(crate) use saving::Saving;

use std::any::Any;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use botmesh_traits::{Bytes, ChatId, ChatKey, Outbound, OutboundContent, SendReceipt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::checkpoint::RecordedAnswer;
use crate::coordination::TurnSlot;
use crate::durable::journal_id;
use crate::shared::{OutboxKey, Shared};
use crate::{BotError, Message, Result, Step};

/// The context of a running conversation or flow.
///
/// Cheap to clone; every clone refers to the same conversation. It answers what a
/// handler's [`Ctx`](crate::Ctx) answers, with the same names and types, for the latest
/// message; and it keeps the conversation's state (`get`, `set`), asks (`ask`, `wait`) and
/// moves on (`goto`).
///
/// ```
/// use botmesh_core::{Bot, BotError, Conversation, Trigger};
/// # use botmesh_testing::TestProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let provider = TestProvider::new();
/// let signup = Conversation::new("signup", |c| async move {
///     let name = c.ask("Your name?").await?.body;
///     c.set("name", &name)?;
///     let email = c.ask(format!("Thanks {name}. Your e-mail?")).await?;
///     c.reply(format!("Signed up as {}", email.body)).await?;
///     Ok::<_, BotError>(())
/// })
/// .trigger(Trigger::keyword("signup"));
/// let bot = Bot::builder().provider(provider.clone()).conversation(signup).build()?;
/// bot.start().await?;
/// for text in ["signup", "Ada", "ada@example.com"] {
///     provider.say("chat-1", text);
///     provider.settled(&bot).await;
/// }
/// assert_eq!(provider.texts_to("chat-1").last().unwrap(), "Signed up as ada@example.com");
/// # bot.stop().await?;
/// # Ok(()) }
/// ```
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
    /// The provider the chat came from: sends go out through it.
    provider: String,
    link: Arc<Link>,
    turn: Arc<TurnSlot>,
    /// Set when the conversation ended: clones kept elsewhere may no longer act for it.
    ended: std::sync::atomic::AtomicBool,
    st: Mutex<ConvState>,
}

struct ConvState {
    name: String,
    state: Map<String, Value>,
    message: Arc<Message>,
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
        self.message = Arc::new(m.clone());
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
            message: Arc::new(message.clone()),
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
                provider: message.inbound.provider.clone(),
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
    /// [`Ctx::message`](crate::Ctx::message) answers the same in a handler.
    pub fn message(&self) -> Arc<Message> {
        Arc::clone(&self.st().message)
    }

    /// The latest message's body (see [`Message::body`]).
    pub fn body(&self) -> String {
        self.st().message.body.clone()
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
    /// the fallback there (reason [`FallbackReason::NotJson`](crate::FallbackReason::NotJson)). A `.persistent()` flow
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
    pub fn text<'a>(&'a self, key: &'a str) -> &'a str {
        let lang = self.lang();
        self.inner.shared.def.texts.get(lang.as_deref(), key)
    }

    /// Sends a text to the chat. A clone of the context kept after the conversation ended (a
    /// reminder sent by a background task) may still send; such a send is not fenced by a turn.
    ///
    /// With durability, a send made again by a step that runs again for the same message
    /// (on another replica after a crash) finds the first one's mark in the outbox and is
    /// skipped; the receipt of a skipped send has no id. A send's mark is named after its place
    /// among the step's sends, taken when it is called (not when it is first awaited).
    pub fn reply(
        &self,
        text: impl Into<String>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + '_ {
        self.send(text.into())
    }

    /// Sends any content to the chat, deduplicated like [`ConvCtx::reply`]. A `&str` or a
    /// `String` is sent as a text.
    pub fn send(
        &self,
        content: impl Into<OutboundContent>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + '_ {
        let message = Outbound::new(self.inner.chat.clone(), content.into());
        self.send_outbound(Cow::Owned(message))
    }

    /// The bytes of the file the latest message carries, fetched through the provider that
    /// received it (see [`Ctx::media`](crate::Ctx::media)).
    pub async fn media(&self) -> Result<Bytes> {
        let message = self.message();
        self.inner.shared.fetch_media(&message.inbound).await
    }

    /// Sends a whole message: to another chat, or quoting a message. Deduplicated like
    /// [`ConvCtx::reply`].
    pub fn send_message<'a>(
        &'a self,
        message: &'a Outbound,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + 'a {
        self.send_outbound(Cow::Borrowed(message))
    }

    /// Sends `message`, owned when the context built it.
    fn send_outbound<'a>(
        &'a self,
        message: Cow<'a, Outbound>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + 'a {
        let outbox = {
            let mut st = self.st();
            let seq = st.send_seq;
            st.send_seq += 1;
            let step = st.step.as_ref().map_or(0, |(i, _)| *i);
            st.input.as_ref().map(|input| OutboxKey {
                key: format!("{}|{input}|{}|{step}|{seq}", self.inner.key, st.name),
                fresh: self.inner.turn.is_fresh(input),
                handler: false,
            })
        };
        let inner = &self.inner;
        inner.shared.send_once(&inner.turn, message, &inner.provider, outbox)
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
            self.reply(prompt).await?;
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
}
