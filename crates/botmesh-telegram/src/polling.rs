//! Long polling: `getUpdates` in a loop on the replica elected for the session.
//!
//! Each update goes to the bot through the intake, and the loop waits until the bot took it
//! (queued, and journaled with durability) before it moves on; only then is the offset moved
//! past it, in the bot's store and, at the next `getUpdates`, at Telegram. An update the bot
//! cannot take now (the journal is down) is offered again until it is taken. So a poller that
//! dies loses nothing: the next one resumes at the stored offset and Telegram still holds
//! what it had not confirmed, and what the old poller handed over but did not record is
//! dropped by the bot's dedupe (its journal, across replicas). A poller asked to stop does so
//! only where nothing is in between: waiting on Telegram, or offering an update the bot will
//! not take; so a stopped bot that starts again, even without a journal, is not handed what
//! it already took.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Intake, ProviderEvent, TransportStatus};
use teloxide_core::payloads::setters::*;
use teloxide_core::requests::{Request, Requester};
use teloxide_core::types::{AllowedUpdate, CallbackQueryId};
use teloxide_core::{ApiError, RequestError};
use tokio::sync::watch;

use crate::errors::is_conflict;
use crate::inbound::map_update;
use crate::offset::Offset;
use crate::state::Inner;

/// The longest pause between two attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long `getUpdates` may keep failing (Telegram unreachable) before the transport is
/// reported closed, so that the step-down rule can hand the session to a standby.
const UNREACHABLE: Duration = Duration::from_secs(30);

/// The longest wait one `getUpdates` may ask for: the client gives up on a request after 17 s.
const MAX_POLL: Duration = Duration::from_secs(15);

/// The updates asked for: everything but what needs a bot to opt in explicitly.
pub(crate) fn allowed() -> Vec<AllowedUpdate> {
    vec![
        AllowedUpdate::Message,
        AllowedUpdate::EditedMessage,
        AllowedUpdate::CallbackQuery,
        AllowedUpdate::MessageReaction,
    ]
}

/// Polls until `stop` says so (or its sender is gone).
pub(crate) async fn run(
    inner: Arc<Inner>,
    intake: Intake,
    timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let offset = Offset::new(intake.store().cloned(), &inner.id);
    let mut next = match offset.load().await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(target: "botmesh", provider = inner.id, error = %e, "reading the poll offset failed; starting from what Telegram holds");
            0
        }
    };
    let mut backoff = Duration::from_millis(100);
    let wait =
        u32::try_from(timeout.clamp(Duration::from_secs(1), MAX_POLL).as_secs()).unwrap_or(1);
    let mut failing_since: Option<tokio::time::Instant> = None;
    while !*stop.borrow() {
        if !intake.holds_transport() {
            // This replica's leases lapsed (a long pause) or the session moved: another
            // replica may poll now, and a second `getUpdates` would cut its poll short (a 409).
            // The bot stops this loop soon; until then it asks nothing.
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                () = tokio::time::sleep(Duration::from_millis(50)) => continue,
            }
        }
        let ask = inner.bot.get_updates().offset(next).timeout(wait).allowed_updates(allowed());
        let asked = tokio::select! {
            biased;
            // Everything handed to the bot so far is recorded.
            _ = stop.changed() => return,
            asked = ask.send() => asked,
        };
        let updates = match asked {
            Ok(updates) => updates,
            Err(e) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= UNREACHABLE {
                    inner.set_status(TransportStatus::Closed);
                }
                tokio::select! {
                    biased;
                    _ = stop.changed() => return,
                    () = pause_after(&inner, &e, &mut backoff) => {}
                }
                continue;
            }
        };
        failing_since = None;
        inner.set_status(TransportStatus::Open);
        backoff = Duration::from_millis(100);
        let username = inner.username();
        let asked_from = next;
        for update in &updates {
            if *stop.borrow() {
                // The rest of the batch is left to the next poller.
                break;
            }
            let mapped = map_update(&inner.id, username.as_deref(), update);
            let Some(taken) = hand_over(&inner, &intake, mapped.inbound, &mut stop).await else {
                // Asked to stop while the bot would not take it: the next poller offers it.
                break;
            };
            if let (true, Some(query)) = (taken, mapped.callback) {
                answer_callback(&inner, query);
            }
            next = i32::try_from(update.id.0).unwrap_or(i32::MAX).saturating_add(1);
        }
        if next != asked_from
            && let Err(e) = offset.save(next).await
        {
            // Telegram confirms the batch at the next getUpdates anyway; a replica taking
            // over before that gets it again, and the bot's dedupe drops it.
            tracing::warn!(target: "botmesh", provider = inner.id, error = %e, "recording the poll offset failed");
        }
    }
}

/// Hands one message to the bot, offering it again until the bot takes it. `Some(false)`
/// when the bot can never take it (too large, not a message): reported, and skipped. `None`
/// when `stop` says so before the bot took it.
async fn hand_over(
    inner: &Inner,
    intake: &Intake,
    inbound: botmesh_traits::Inbound,
    stop: &mut watch::Receiver<bool>,
) -> Option<bool> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let verdict = intake.accept(inbound.clone()).await;
        if verdict.is_taken() {
            return Some(true);
        }
        if verdict.status() != 503 {
            let reason = format!("update {} refused by the bot: {verdict}", inbound.id);
            inner.report(ProviderEvent::Rejected { reason });
            return Some(false);
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Stops the spinner on the button the user pressed, in the background: a slow answer never
/// holds up the updates after it.
pub(crate) fn answer_callback(inner: &Inner, query: String) {
    let (bot, provider) = (inner.bot.clone(), inner.id.clone());
    tokio::spawn(async move {
        let answered = bot.answer_callback_query(CallbackQueryId(query)).send().await;
        if let Err(e) = answered {
            tracing::debug!(target: "botmesh", provider, error = %e, "answering a callback query failed");
        }
    });
}

/// Waits after a failed `getUpdates`, as long as the failure asks.
///
/// A conflict (another poller, or a webhook set) and a revoked token close the transport: the
/// election's step-down rule hands the session to a standby if it stays closed. The loop keeps
/// trying meanwhile, slowly, so a conflict that clears reopens it.
async fn pause_after(inner: &Inner, e: &RequestError, backoff: &mut Duration) {
    let wait = match e {
        RequestError::RetryAfter(s) => {
            // Throttled on a call for no chat: every call waits.
            inner.pauses.pause(None, s.duration());
            s.duration()
        }
        e if is_conflict(e) || matches!(e, RequestError::Api(ApiError::InvalidToken)) => {
            tracing::warn!(target: "botmesh", provider = inner.id, error = %e, "polling refused; the transport is closed");
            inner.set_status(TransportStatus::Closed);
            MAX_BACKOFF
        }
        e => {
            tracing::debug!(target: "botmesh", provider = inner.id, error = %e, "getUpdates failed; trying again");
            let wait = *backoff;
            *backoff = (*backoff * 2).min(MAX_BACKOFF);
            wait
        }
    };
    tokio::time::sleep(wait).await;
}
