//! Runs a flow's steps, or a conversation's function, as one future the chat worker drives.

use std::sync::Arc;

use botmesh_traits::BoxError;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::checkpoint::RecordedAnswer;
use crate::conv::Saving;
use crate::flow::{Ask, Def, Flow, StepDef};
use crate::handover::FlowHandover;
use crate::texts::keys;
use crate::{BotError, ConvCtx, Event, Message, Result, Step};

/// What a finished conversation asks the worker to do next.
#[derive(Debug)]
pub(crate) enum Next {
    End,
    Start(String),
}

/// Where a resumed flow continues.
#[derive(Debug)]
pub(crate) struct Resume {
    pub(crate) step: usize,
    pub(crate) state: Map<String, Value>,
    /// The answers the step consumed before it was interrupted, fed back to its waits in
    /// order.
    pub(crate) replay: Vec<(Message, RecordedAnswer)>,
    /// The question the step was parked on.
    pub(crate) parked_on: Option<u32>,
    /// With durability, the journal id of the message the step began under.
    pub(crate) input: Option<String>,
    /// A message for the wait after the replayed answers: the one that woke the flow.
    pub(crate) kept: Option<Message>,
    /// The checkpoint was ephemeral.
    pub(crate) ephemeral: bool,
}

/// Turns a user's boxed error back into a [`BotError`] when it is one (so that `?` on
/// [`ConvCtx::ask`] keeps `Idle` recognizable), else wraps it as a handler error.
pub(crate) fn user_error(ctx: &ConvCtx, source: BoxError) -> BotError {
    match source.downcast::<BotError>() {
        Ok(e) => *e,
        Err(source) => BotError::Handler { key: ctx.key().clone(), source },
    }
}

pub(crate) fn run(
    ctx: ConvCtx,
    def: Def,
    resume: Option<Resume>,
) -> BoxFuture<'static, Result<Next>> {
    match def {
        Def::Flow(flow) => Box::pin(async move { run_flow(ctx, &flow, resume).await }),
        Def::Conv(conv) => Box::pin(async move {
            ctx.begin_conversation(&conv.name, conv.timeout);
            (conv.f)(ctx.clone()).await.map(|()| Next::End).map_err(|e| user_error(&ctx, e))
        }),
    }
}

async fn run_flow(ctx: ConvCtx, flow: &Flow, resume: Option<Resume>) -> Result<Next> {
    let (mut index, state, resume) = match resume {
        Some(r) => (r.step, r.state, Some((r.replay, r.parked_on, r.input))),
        None => (0, Map::new(), None),
    };
    let saving = if flow.persistent {
        Saving::Persistent { fingerprint: Arc::clone(&flow.fingerprint) }
    } else if ctx.shared().def.handover.flows == FlowHandover::Forward {
        Saving::Ephemeral { fingerprint: Arc::clone(&flow.fingerprint) }
    } else {
        Saving::Off
    };
    ctx.begin_flow(&flow.name, saving, flow.timeout, state);
    if let Some((replay, parked_on, input)) = resume {
        ctx.resume_step(replay, parked_on, input);
    }
    while let Some(step) = flow.steps.get(index) {
        ctx.shared().events.emit(Event::Step {
            key: ctx.key().clone(),
            flow: flow.name.clone(),
            index,
            step: step.name().to_owned(),
        });
        let span = tracing::debug_span!("step", flow = %flow.name, index, step = step.name());
        let next = async {
            ctx.begin_step(index, matches!(step, StepDef::Do { .. })).await?;
            match step {
                StepDef::Ask(a) => run_ask(&ctx, a).await,
                StepDef::Do { f, .. } => f(ctx.clone()).await.map_err(|e| user_error(&ctx, e)),
            }
        }
        .instrument(span)
        .await;
        let diverged = BotError::ReplayDiverged { name: flow.name.clone(), step: index };
        match &next {
            Err(BotError::ReplayDiverged { .. }) => {
                // The step waited elsewhere than where it was parked: its recorded answers do not
                // fit its code as it runs now. The guide's rule: it runs again from its start.
                ctx.shared().events.error(Some(ctx.key()), diverged);
                ctx.restart_step();
                continue;
            }
            Ok(_) if !ctx.replay_done() => {
                // It finished without using every recorded answer. What it did stands (running
                // it again would repeat its work); the message that woke it routes as a new one.
                ctx.shared().events.error(Some(ctx.key()), diverged);
                ctx.abandon_replay();
            }
            _ => {}
        }
        match next? {
            Step::Next => index += 1,
            Step::End => break,
            Step::Repeat => {}
            Step::Goto(name) => return Ok(Next::Start(name)),
        }
    }
    Ok(Next::End)
}

async fn run_ask(ctx: &ConvCtx, ask: &Ask) -> Result<Step> {
    let mut answer = ctx.ask(ask.prompt.clone()).await?;
    loop {
        match check(ctx, ask, &answer) {
            Ok(value) => {
                ctx.set(&ask.field, value)?;
                return Ok(Step::Next);
            }
            Err(reask) => {
                ctx.send(reask).await?;
                answer = ctx.wait().await?;
            }
        }
    }
}

fn check(ctx: &ConvCtx, ask: &Ask, answer: &Message) -> Result<Value, String> {
    let lang = ctx.lang();
    let texts = &ctx.shared().def.texts;
    let body = answer.body.trim();
    let mut value = None;
    if !ask.choices.is_empty() {
        match ask.choices.iter().find(|c| c.trim().eq_ignore_ascii_case(body)) {
            Some(c) => value = Some(Value::String(c.clone())),
            None => {
                let options = ask.choices.join(", ");
                return Err(texts.format(lang.as_deref(), keys::CHOOSE, &[("options", &options)]));
            }
        }
    }
    if let Some(v) = &ask.validator {
        return v(answer).map_err(|text| {
            if text.is_empty() {
                texts.get(lang.as_deref(), keys::INVALID).to_owned()
            } else {
                text
            }
        });
    }
    match value {
        Some(v) => Ok(v),
        None if body.is_empty() => Err(texts.get(lang.as_deref(), keys::INVALID).to_owned()),
        None => Ok(Value::String(body.to_owned())),
    }
}
