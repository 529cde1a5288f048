//! What every part of a running bot shares: its definitions (flows, handlers, hooks, cancel
//! words), its I/O (provider, store, coordination, durability) and its events; and sending
//! under a chat's turn, once per outbox key.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use botmesh_traits::{BoxError, Bytes, Error, Inbound, JournalStore, Outbound, SendReceipt, Store};
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::checkpoint;
use crate::coordination::{Coordination, TurnSlot};
use crate::event::EventBus;
use crate::flow::Def;
use crate::providers::Providers;
use crate::repair::{Journal, Repairs};
use crate::retry;
use crate::telemetry::{Meters, TracePropagation};
use crate::{BotError, Ctx, Durability, Event, Handover, Message, Result, Texts, Trigger};

/// How long a read of an outbox mark whose reply was lost is asked again before the send fails.
const MARK_BUDGET: Duration = Duration::from_millis(1500);

/// How long a send waits in all for platforms that throttle it before it fails with
/// `RateLimited`.
const RATE_LIMIT_BUDGET: Duration = Duration::from_secs(60);

/// The shortest wait before a throttled send is tried again.
const MIN_RATE_LIMIT_WAIT: Duration = Duration::from_millis(100);

/// The outbox entry of one send, with durability.
pub(crate) struct OutboxKey {
    /// The send's key: its chat, its message's journal id, its handler or step, its number.
    pub(crate) key: String,
    /// Its message is handled for the first time (see [`TurnSlot::is_fresh`]): no earlier run
    /// can have made this send.
    pub(crate) fresh: bool,
    /// A handler's send, whose mark may wait for its message's run to end (see `outbox.rs`);
    /// a step's is written at once.
    pub(crate) handler: bool,
}

pub(crate) type HandlerFn =
    Arc<dyn Fn(Ctx) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;
pub(crate) type HookFn =
    Arc<dyn Fn(Message) -> BoxFuture<'static, Result<Message, BoxError>> + Send + Sync>;

/// What the bot is: its definitions and settings, fixed once it is built.
pub(crate) struct Definitions {
    /// Flows and conversations by name.
    pub(crate) defs: HashMap<String, Def>,
    /// Flows and conversations with triggers, in registration order.
    pub(crate) triggered: Vec<Def>,
    pub(crate) handlers: Vec<HandlerFn>,
    /// The `before_message` hooks, in order.
    pub(crate) hooks: Vec<HookFn>,
    /// Words that end whatever conversation waits.
    pub(crate) cancels: Vec<Trigger>,
    pub(crate) texts: Texts,
    /// Some flow is persistent: a chat without a conversation in memory may have a checkpoint.
    pub(crate) has_persistent: bool,
    /// Some flow is set aside when interrupted, to resume later.
    pub(crate) has_resumable: bool,
    /// Some flow or conversation is defined: a checkpoint another replica wrote (a forwarded
    /// flow in a rolling deploy) can be resumed here.
    pub(crate) has_flows: bool,
    /// The largest message body taken in.
    pub(crate) max_body_bytes: usize,
    /// How conversations are carried between replicas.
    pub(crate) handover: Handover,
}

/// What every part of a running bot shares: what it is ([`Definitions`]), its I/O (provider,
/// store, coordination, the journal) and its events.
pub(crate) struct Shared {
    /// What the bot is.
    pub(crate) def: Definitions,
    /// The providers, and which of their transports run here.
    pub(crate) providers: Providers,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) coordination: Option<Arc<dyn Coordination>>,
    /// Checkpoint writes are compare-and-set: coordination is on and the store can.
    pub(crate) cas_checkpoints: bool,
    /// The inbox journal and the outbox, when on.
    pub(crate) durability: Option<Durability>,
    /// Who owns what this process journals: the replica's incarnation, else a fresh id.
    pub(crate) owner: String,
    /// The coordination writes the store's journal itself: messages are journaled with their
    /// tickets, and acknowledged with their turns' releases (see `Coordination::journals`).
    pub(crate) journaled_turns: bool,
    /// Journal writes still to land.
    pub(crate) repairs: Repairs,
    /// Where events go: listeners, subscribers, and `tracing`.
    pub(crate) events: EventBus,
    /// The metric handles of the message path.
    pub(crate) meters: Meters,
    /// Carries message traces through the journal, when the user set one.
    pub(crate) propagation: Option<Arc<dyn TracePropagation>>,
}

impl Shared {
    /// The checkpoint rows of the bot's store, written the way the bot is set up.
    pub(crate) fn checkpoints(&self) -> checkpoint::Rows<'_> {
        let cas = if self.cas_checkpoints { self.store.cas() } else { None };
        checkpoint::Rows { store: &*self.store, cas }
    }

    /// The store's inbox journal and outbox; [`Error::Unsupported`] in a store without them
    /// (the builder refuses durability with such a store).
    pub(crate) fn inbox(&self) -> Result<&dyn JournalStore, Error> {
        self.journal().inbox()
    }

    /// What the repair queue writes through.
    pub(crate) fn journal(&self) -> Journal<'_> {
        Journal { store: &*self.store, events: &self.events, owner: &self.owner }
    }

    /// Sends under a chat's turn (refused with `LeaseLost` once the turn is known lost), once
    /// per outbox key: with durability and a key, the send is first recorded in the outbox,
    /// and skipped when a run before this one already made it. A message that names no
    /// provider goes out through `via`, the provider of the chat it answers.
    ///
    /// Not an `async fn`, nor are the contexts' sends that call it: a handler's future holds
    /// its send's, and each async layer would hold its own copy of the message besides.
    pub(crate) fn send_once<'a>(
        &'a self,
        turn: &'a TurnSlot,
        message: Cow<'a, Outbound>,
        via: &'a str,
        outbox: Option<OutboxKey>,
    ) -> impl Future<Output = Result<SendReceipt>> + Send + 'a {
        let span = tracing::debug_span!(target: "botmesh", "send", provider = via);
        turn.effect(self.send_once_in_effect(turn, message, via, outbox)).instrument(span)
    }

    /// [`Shared::send_once`] in its effect: the turn is checked, the cut included, when the
    /// send starts.
    async fn send_once_in_effect(
        &self,
        turn: &TurnSlot,
        message: Cow<'_, Outbound>,
        via: &str,
        outbox: Option<OutboxKey>,
    ) -> Result<SendReceipt> {
        turn.check()?;
        let (Some(key), Some(durability)) = (outbox, &self.durability) else {
            return self.send(&message, Some(via)).await;
        };
        // Boxed: a handler's future holds its sends', and without durability it should not
        // carry room for the outbox's.
        Box::pin(self.send_deduplicated(turn, message, via, key, durability)).await
    }

    /// Sends `message` once per outbox `key` (see [`Shared::send_once`]).
    async fn send_deduplicated(
        &self,
        turn: &TurnSlot,
        message: Cow<'_, Outbound>,
        via: &str,
        OutboxKey { key, fresh, handler }: OutboxKey,
        durability: &Durability,
    ) -> Result<SendReceipt> {
        let inbox = self.inbox()?;
        // A send is marked in the outbox once it went out, and skipped by a later run of the
        // same step that finds the mark. A crash between the send and its mark sends it again
        // (at least once, never lost). A message handled for the first time has no earlier
        // run: it sends straight away. A later run reads the mark first; reading writes
        // nothing, so a crash before the send loses nothing. A handler's mark waits for its
        // message's run to end, which writes it only when the message may run again (see
        // `outbox.rs`).
        let chat = |m: &Outbound| botmesh_traits::ChatKey::new(m.chat.as_str());
        if !fresh && self.outbox_marked(turn, inbox, &mark_of(key.clone())).await? {
            self.events.emit(Event::SendSkipped { chat: message.chat.clone(), outbox: key });
            return Ok(SendReceipt::new(None));
        }
        let _in_flight = self.meters.outbox_backlog.hold();
        // A message the handler built here is not copied to carry its key.
        let mut message = message.into_owned().with_idempotency_key(key);
        let receipt = self.send(&message, Some(via)).await?;
        // The message goes no further: the key it carries (set above) becomes the mark's.
        let Some(mark) = message.idempotency_key.take().map(mark_of) else { return Ok(receipt) };
        if handler && !durability.mark_within.is_zero() {
            turn.marks.keep(mark);
        } else if let Err(e) = inbox.outbox_mark(&mark, durability.outbox_ttl).await {
            // Unmarked, a rerun of the step sends it again rather than never.
            self.events.error(Some(&chat(&message)), e.into());
        }
        Ok(receipt)
    }

    /// Whether an earlier run of the step marked send `key`, for a run that is not the
    /// message's first. A read whose reply was lost (a dropped connection, a timeout) is asked
    /// again, with the retry policy, for as long as [`MARK_BUDGET`], and only while the turn
    /// holds: a read answers the same however often it is asked.
    async fn outbox_marked(
        &self,
        turn: &TurnSlot,
        inbox: &dyn JournalStore,
        key: &str,
    ) -> Result<bool> {
        let failed = AtomicBool::new(false);
        Ok(retry::within(MARK_BUDGET, || async {
            if failed.load(Ordering::Relaxed) {
                turn.check()?;
            }
            let marked = inbox.outbox_marked(key).await;
            failed.fetch_or(marked.is_err(), Ordering::Relaxed);
            marked
        })
        .await?)
    }

    /// Sends through the provider `message` names, else `via`, else the bot's only one. A
    /// platform that throttles (`RateLimited`) is waited for as long as it asks and tried
    /// again, within [`RATE_LIMIT_BUDGET`] in all.
    pub(crate) async fn send(&self, message: &Outbound, via: Option<&str>) -> Result<SendReceipt> {
        let transport = self.providers.route(message.provider.as_deref(), via)?;
        if self.coordination.is_some() && !self.providers.is_up(transport) {
            // A standby replica: the transport is connected elsewhere.
            return Err(Error::ProviderNotLeader { provider: transport.id.to_string() }.into());
        }
        let mut waited = Duration::ZERO;
        let receipt = loop {
            match transport.provider.send(message).await {
                Err(Error::RateLimited { retry_after })
                    if waited + retry_after <= RATE_LIMIT_BUDGET =>
                {
                    self.events.emit(Event::RateLimited {
                        provider: transport.id.to_string(),
                        retry_after,
                    });
                    // A platform asking for no wait at all still gets a short one.
                    let wait = retry_after.max(MIN_RATE_LIMIT_WAIT);
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    if self.coordination.is_some() && !self.providers.is_up(transport) {
                        // The transport moved to another replica meanwhile.
                        let provider = transport.id.to_string();
                        return Err(Error::ProviderNotLeader { provider }.into());
                    }
                }
                sent => break sent?,
            }
        };
        self.events.emit(Event::Sent { chat: message.chat.clone() });
        Ok(receipt)
    }

    /// The bytes of the file `message` carries, through the provider that received it.
    pub(crate) async fn fetch_media(&self, message: &Inbound) -> Result<Bytes> {
        let media = message.content.media().ok_or_else(|| Error::InvalidInput {
            reason: format!("message {} carries no file", message.id),
        })?;
        let transport = self.providers.route(None, Some(&message.provider))?;
        Ok(transport.provider.fetch_media(media).await?)
    }

    pub(crate) async fn user_data(&self, key: &str) -> Result<Value> {
        match self.store.get_user_data(key).await? {
            None => Ok(Value::Object(Map::new())),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| Error::corrupt(format!("user data of {key}"), e).into()),
        }
    }

    pub(crate) async fn set_user_data<T: Serialize>(&self, key: &str, data: &T) -> Result<()> {
        let text = serde_json::to_string(data).map_err(|source| BotError::StateNotJson {
            name: "user".to_owned(),
            field: key.to_owned(),
            source,
        })?;
        self.store.set_user_data(key, &text).await?;
        Ok(())
    }
}

/// The outbox entry that marks the send of outbox key `key` made. A handler's key is built with
/// room for the suffix (see `Ctx::outbox_key`).
fn mark_of(mut key: String) -> String {
    key.push_str("|sent");
    key
}
