//! Flows (a list of steps) and free-form conversations (an async function), and how they are
//! defined.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::BoxError;
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::boxing::errors_boxed;
use crate::{ConvCtx, Message, Trigger};

/// What a `do` step asks for next.
///
/// ```
/// use botmesh_core::{BotError, Flow, Step};
///
/// let flow = Flow::new("checkout")
///     .do_step("pay", |c| async move {
///         if c.get::<bool>("paid").unwrap_or(false) {
///             return Ok::<_, BotError>(Step::End);
///         }
///         c.reply("Let's try another card.").await?;
///         Ok(Step::goto("card"))
///     });
/// assert_eq!(flow.name(), "checkout");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Go on with the next step (the flow ends after its last one).
    Next,
    /// End the flow now.
    End,
    /// Run this step again from its start.
    Repeat,
    /// End this flow and start the flow or conversation with this name, under the same turn.
    Goto(String),
}

impl Step {
    /// Ends this flow and starts `name`; the same as [`ConvCtx::goto`].
    pub fn goto(name: impl Into<String>) -> Self {
        Self::Goto(name.into())
    }
}

pub(crate) type Validator = Arc<dyn Fn(&Message) -> Result<Value, String> + Send + Sync>;
pub(crate) type DoFn =
    Arc<dyn Fn(ConvCtx) -> BoxFuture<'static, Result<Step, BoxError>> + Send + Sync>;
pub(crate) type ConvFn =
    Arc<dyn Fn(ConvCtx) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

/// A question step: send a prompt, wait for the answer, validate it, store it in the state.
///
/// An answer that fails validation gets a re-ask (the validator's text, or the localized
/// `core.flow.invalid`) and the step waits again. Without a validator the answer's body is
/// stored as a string.
///
/// ```
/// use botmesh_core::{Ask, Flow};
///
/// let size = Ask::new("size", "Which size? S, M or L").choices(["S", "M", "L"]);
/// let qty = Ask::new("qty", "How many?").validate(|m| {
///     m.body.trim().parse::<u32>().map(Into::into).map_err(|_| "A number, please.".to_owned())
/// });
/// let flow = Flow::new("order").ask(size).ask(qty);
/// # let _ = flow;
/// ```
#[derive(Clone)]
#[must_use = "a question does nothing until a flow step asks it"]
pub struct Ask {
    pub(crate) field: String,
    pub(crate) prompt: String,
    pub(crate) validator: Option<Validator>,
    pub(crate) choices: Vec<String>,
}

impl fmt::Debug for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ask").field("field", &self.field).field("prompt", &self.prompt).finish()
    }
}

impl Ask {
    /// Asks `prompt` and stores the answer's body under `field`.
    pub fn new(field: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self { field: field.into(), prompt: prompt.into(), validator: None, choices: Vec::new() }
    }

    /// Accepts only one of `choices` (ignoring case); the stored value is the choice as
    /// written here. Anything else gets the localized `core.flow.choose` re-ask.
    pub fn choices<I, S>(mut self, choices: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.choices = choices.into_iter().map(Into::into).collect();
        self
    }

    /// Validates the answer: `Ok(value)` is stored under the field, `Err(text)` is sent back
    /// and the question waits again. An empty `text` sends the localized `core.flow.invalid`.
    pub fn validate<F>(mut self, f: F) -> Self
    where
        F: Fn(&Message) -> Result<Value, String> + Send + Sync + 'static,
    {
        self.validator = Some(Arc::new(f));
        self
    }
}

#[derive(Clone)]
pub(crate) enum StepDef {
    Ask(Ask),
    Do { name: String, f: DoFn },
}

impl StepDef {
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Ask(a) => &a.field,
            Self::Do { name, .. } => name,
        }
    }
}

/// A conversation written as a list of steps.
///
/// ```
/// use botmesh_core::{Ask, Flow, Step, Trigger};
///
/// let order = Flow::new("order")
///     .trigger(Trigger::keyword("order"))
///     .persistent()
///     .ask(Ask::new("size", "Which size? S, M or L").choices(["S", "M", "L"]))
///     .do_step("confirm", |c| async move {
///         let size: String = c.get("size").unwrap_or_default();
///         c.send(format!("One {size} coming up!")).await?;
///         Ok::<_, botmesh_core::BotError>(Step::End)
///     });
/// # let _ = order;
/// ```
///
/// A `.persistent()` flow writes a checkpoint to the store at the start of every step and
/// again when it parks on a question, so a new bot on the same store (a restarted process,
/// another replica) continues where it stopped: the next message answers the question the flow
/// was parked on, and a `do` step that already took answers gets them back in order instead of
/// asking again. When that replay cannot be faithful (the flow changed, an answer could not be
/// recorded), the step runs again from its start.
#[derive(Clone)]
#[must_use = "a flow does nothing until given to `BotBuilder::flow`"]
pub struct Flow {
    pub(crate) name: String,
    pub(crate) triggers: Vec<Trigger>,
    /// Words that end this flow while it waits (besides the bot's own).
    pub(crate) cancels: Vec<Trigger>,
    /// Its triggers start it even while another conversation waits, which then ends.
    pub(crate) interrupts: bool,
    /// Interrupted, it is set aside and resumes once the interrupting conversation completes.
    pub(crate) resumes: bool,
    pub(crate) steps: Vec<StepDef>,
    pub(crate) persistent: bool,
    pub(crate) timeout: Option<Duration>,
    /// Set once the flow is registered with a bot (see [`Flow::compute_fingerprint`]).
    pub(crate) fingerprint: Arc<str>,
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flow")
            .field("name", &self.name)
            .field("steps", &self.steps.iter().map(StepDef::name).collect::<Vec<_>>())
            .field("persistent", &self.persistent)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Flow {
    /// An empty flow named `name`; names are unique among a bot's flows and conversations.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            triggers: Vec::new(),
            cancels: Vec::new(),
            interrupts: false,
            resumes: false,
            steps: Vec::new(),
            persistent: false,
            timeout: None,
            fingerprint: Arc::from(""),
        }
    }

    /// Starts the flow on messages matching `trigger` (when no conversation is waiting).
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.triggers.push(trigger);
        self
    }

    /// Ends the flow while it waits for an answer when the answer matches `trigger`, as the
    /// bot's own cancel words do ([`BotBuilder::cancel_on`](crate::BotBuilder::cancel_on)).
    pub fn cancel_on(mut self, trigger: Trigger) -> Self {
        self.cancels.push(trigger);
        self
    }

    /// Lets this flow's triggers start it even while another conversation waits for an answer:
    /// that conversation ends ([`EndReason::Interrupted`](crate::EndReason::Interrupted)), or is
    /// set aside if it asked for it ([`Flow::resume_after_interruption`]). Without it, a waiting
    /// conversation gets every message.
    pub fn interrupts(mut self, interrupts: bool) -> Self {
        self.interrupts = interrupts;
        self
    }

    /// When another flow or conversation interrupts this one, sets it aside instead of ending
    /// it, and resumes it where it waited (asking its question again) once the interrupting one
    /// completes. Needs [`Flow::persistent`]: what is set aside is the flow's checkpoint.
    pub fn resume_after_interruption(mut self) -> Self {
        self.resumes = true;
        self
    }

    /// Checkpoints the flow in the store at every step.
    pub fn persistent(mut self) -> Self {
        self.persistent = true;
        self
    }

    /// Ends the flow when an answer takes longer than `timeout` (the localized
    /// `core.conversation.timeout` text is sent).
    pub fn timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.timeout = timeout.into();
        self
    }

    /// Adds a question step.
    pub fn ask(mut self, ask: Ask) -> Self {
        self.steps.push(StepDef::Ask(ask));
        self
    }

    /// Adds a `do` step: any async code, which may send, sleep, ask several questions, and
    /// says what comes next.
    #[doc(alias = "do")]
    pub fn do_step<F, Fut, E>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(ConvCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Step, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let f: DoFn = Arc::new(move |c| {
            let fut = f(c);
            Box::pin(errors_boxed(fut))
        });
        self.steps.push(StepDef::Do { name: name.into(), f });
        self
    }

    /// The flow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the flow is checkpointed.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// A hash of the flow's shape (its steps, their kinds, questions and choices), so that a
    /// replica running a changed definition does not resume a forwarded checkpoint at the
    /// wrong step.
    pub(crate) fn compute_fingerprint(&self) -> String {
        let mut parts: Vec<&str> = vec![&self.name];
        for step in &self.steps {
            match step {
                StepDef::Ask(a) => {
                    parts.extend(["ask", &a.field, &a.prompt]);
                    parts.extend(a.choices.iter().map(String::as_str));
                }
                StepDef::Do { name, .. } => parts.extend(["do", name.as_str()]),
            }
        }
        format!("{:016x}", crate::handover::fnv1a(&parts))
    }
}

/// A free-form conversation: an async function that waits for the user's next message with
/// [`ConvCtx::wait`] or [`ConvCtx::ask`].
///
/// Its stack lives in the memory of the process that runs it; it is not checkpointed.
///
/// ```
/// use botmesh_core::{Conversation, Trigger};
///
/// let support = Conversation::new("support", |c| async move {
///     let problem = c.ask("What went wrong?").await?;
///     c.send(format!("Noted: {}", problem.body)).await?;
///     Ok::<_, botmesh_core::BotError>(())
/// })
/// .trigger(Trigger::keyword("help"));
/// # let _ = support;
/// ```
#[derive(Clone)]
#[must_use = "a conversation does nothing until given to `BotBuilder::conversation`"]
pub struct Conversation {
    pub(crate) name: String,
    pub(crate) triggers: Vec<Trigger>,
    pub(crate) cancels: Vec<Trigger>,
    pub(crate) interrupts: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) f: ConvFn,
}

impl fmt::Debug for Conversation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conversation").field("name", &self.name).finish()
    }
}

impl Conversation {
    /// A conversation named `name` running `f`.
    pub fn new<F, Fut, E>(name: impl Into<String>, f: F) -> Self
    where
        F: Fn(ConvCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let f: ConvFn = Arc::new(move |c| {
            let fut = f(c);
            Box::pin(errors_boxed(fut))
        });
        Self {
            name: name.into(),
            triggers: Vec::new(),
            cancels: Vec::new(),
            interrupts: false,
            timeout: None,
            f,
        }
    }

    /// Starts the conversation on messages matching `trigger`.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.triggers.push(trigger);
        self
    }

    /// Ends the conversation when an answer takes longer than `timeout`.
    pub fn timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.timeout = timeout.into();
        self
    }

    /// Ends the conversation while it waits when the answer matches `trigger` (see
    /// [`Flow::cancel_on`]).
    pub fn cancel_on(mut self, trigger: Trigger) -> Self {
        self.cancels.push(trigger);
        self
    }

    /// Lets this conversation's triggers start it even while another conversation waits (see
    /// [`Flow::interrupts`]).
    pub fn interrupts(mut self, interrupts: bool) -> Self {
        self.interrupts = interrupts;
        self
    }
}

/// A flow or a conversation, as the registry keeps them.
#[derive(Clone, Debug)]
pub(crate) enum Def {
    Flow(Arc<Flow>),
    Conv(Arc<Conversation>),
}

impl Def {
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Flow(f) => &f.name,
            Self::Conv(c) => &c.name,
        }
    }

    pub(crate) fn triggers(&self) -> &[Trigger] {
        match self {
            Self::Flow(f) => &f.triggers,
            Self::Conv(c) => &c.triggers,
        }
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        match self {
            Self::Flow(f) => f.timeout,
            Self::Conv(c) => c.timeout,
        }
    }

    /// Its own cancel words.
    pub(crate) fn cancels(&self) -> &[Trigger] {
        match self {
            Self::Flow(f) => &f.cancels,
            Self::Conv(c) => &c.cancels,
        }
    }

    /// Whether its triggers interrupt a waiting conversation.
    pub(crate) fn interrupts(&self) -> bool {
        match self {
            Self::Flow(f) => f.interrupts,
            Self::Conv(c) => c.interrupts,
        }
    }

    /// Whether, interrupted, it is set aside to resume later (a persistent flow that asked).
    pub(crate) fn resumes(&self) -> bool {
        matches!(self, Self::Flow(f) if f.resumes && f.persistent)
    }
}
