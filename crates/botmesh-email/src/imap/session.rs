//! The IMAP loop on the replica elected for the session: select the mailbox, hand each new
//! mail to the bot, wait in IDLE (or poll), and start again after a lost connection.
//!
//! Each mail, in UID order, is handed to the bot through the intake, and the loop waits until
//! the bot took it (queued, and journaled with durability). Only then is it flagged `\Seen`
//! and the position (UIDVALIDITY and UID) moved past it in the bot's store. A mail the bot
//! cannot take now is offered again until it is taken. So a session that dies loses nothing:
//! the next leader resumes after the stored UID, and a mail the old leader handed over but did
//! not record is offered again and dropped by the bot's dedupe (its journal, across replicas;
//! the message id is a digest of the sender's address and the mail's `Message-ID`).
//!
//! Rules for what does not go to the bot:
//! - A **malformed** mail (see `parse.rs`) is reported once as a `Rejected` event, never
//!   flagged `\Seen` (or moved to the quarantine folder when one is set), and the position
//!   moves past it: the loop never stops on it and never offers it again, and it stays in the
//!   mailbox for a person.
//! - A mail the bot refuses for good, or larger than `max_mail_bytes` by the size the server
//!   reports (`RFC822.SIZE`, read before the mail is downloaded, which it then is not), is
//!   treated the same way.
//! - A **UIDVALIDITY change** (the server renumbered the mailbox) is reported as a `Rejected`
//!   event saying so; the loop then resumes with the mails not flagged `\Seen`, since exactly
//!   those were never acknowledged. A mail that was acknowledged but not yet flagged when the
//!   change happened is offered again and dropped by the bot's dedupe; malformed mails, left
//!   unseen, are reported again.
//! - A **first start** (no position recorded, `Backlog::Unseen`) also begins with the mails not
//!   flagged `\Seen`. During such a pass the position is recorded once, at its end, so a
//!   leader that dies halfway leaves the next one the same rule, not a UID that would skip
//!   unseen mails below it. The exception to "reported once": the malformed and too large
//!   mails of a pass interrupted that way are still unseen, so the next leader reports them
//!   again (mails the bot took are flagged `\Seen` by then, or dropped by its dedupe).
//!
//! Every IMAP command runs within `command_timeout`; one that takes longer is a lost
//! connection (a server or network that stopped answering), so the session is made again and
//! the transport closes after `down_after`. The transport is reported open, and the clock
//! of `down_after` reset, only once a session searched the mailbox: a server that accepts
//! `SELECT` and then drops every session keeps counting as down.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_imap::error::Error as ImapError;
use async_imap::types::UnsolicitedResponse;
use botmesh_traits::{Intake, TransportStatus};
use futures_util::TryStreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::conn::{self, ImapSession};
use crate::config::{Backlog, ImapConfig};
use crate::parse::parse;
use crate::progress::{Position, Progress};
use crate::state::Inner;

/// Resolves once the provider is told to stop (or its switch is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn is_stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// `command`, within `limit`: past it, an I/O error (timed out), which the loop takes for a
/// lost connection and drops.
pub(crate) async fn timed<T>(
    limit: Duration,
    what: &str,
    command: impl Future<Output = Result<T, ImapError>>,
) -> Result<T, ImapError> {
    match tokio::time::timeout(limit, command).await {
        Ok(done) => done,
        Err(_) => Err(ImapError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the IMAP server did not answer {what} within {limit:?}"),
        ))),
    }
}

/// `ConnectionLost` when the connection under `s` ended: what the last command returned was
/// not the server's answer (see [`conn::closed`]).
fn alive(s: &ImapSession) -> Result<(), ImapError> {
    if conn::closed(s) { Err(ImapError::ConnectionLost) } else { Ok(()) }
}

/// How long leaving IDLE and `LOGOUT` may each take when the provider stops: half of the
/// provider's stop timeout, so both fit in it.
fn farewell(inner: &Inner) -> Duration {
    inner.settings.stop_timeout / 2
}

/// Logs out within `limit`; past it the connection is dropped.
async fn logout(mut session: ImapSession, limit: Duration) {
    let _ = tokio::time::timeout(limit, session.logout()).await;
}

/// Whether the server reported new mail (`EXISTS`, `RECENT`) in the responses to earlier
/// commands; empties the queue of such reports either way.
fn arrived(s: &ImapSession) -> bool {
    let mut arrived = false;
    while let Ok(response) = s.unsolicited_responses.try_recv() {
        arrived |=
            matches!(response, UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_));
    }
    arrived
}

/// Where the next search starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    Unseen,
    After(u32),
}

/// What a turn of the loop ended with.
enum Served {
    /// Told to stop: the session, to log out.
    Stopped(ImapSession),
    /// The connection broke.
    Lost(ImapError),
}

struct Loop {
    inner: Arc<Inner>,
    config: ImapConfig,
    intake: Intake,
    progress: Progress,
    /// The position this process reached, fresher than the store's when a write failed.
    at: Option<Position>,
}

/// Runs the session until the provider stops. `first` is the session `start` opened.
pub(crate) async fn run(
    inner: Arc<Inner>,
    config: ImapConfig,
    intake: Intake,
    first: ImapSession,
    mut stop: watch::Receiver<bool>,
) {
    let progress = Progress::new(intake.store().cloned(), &inner.id, &config.mailbox);
    let mut this = Loop { inner, config, intake, progress, at: None };
    let mut session = Some(first);
    let mut backoff = Duration::from_millis(100);
    let mut down_since: Option<Instant> = None;
    loop {
        let s = match session.take() {
            Some(s) => s,
            None => {
                let login = tokio::select! {
                    l = conn::login(&this.inner.id, &this.config) => l,
                    () = stopped(&mut stop) => return,
                };
                match login {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(target: "botmesh", provider = this.inner.id, error = %e, "IMAP login failed; trying again");
                        let since = *down_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= this.config.down_after
                            || matches!(e, botmesh_traits::Error::Unauthorized { .. })
                        {
                            this.inner.set_status(TransportStatus::Closed);
                        }
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            () = stopped(&mut stop) => return,
                        }
                        backoff = (backoff * 2).min(this.config.max_backoff);
                        continue;
                    }
                }
            }
        };
        match this.serve(s, &mut stop, &mut down_since, &mut backoff).await {
            Served::Stopped(s) => {
                logout(s, farewell(&this.inner)).await;
                return;
            }
            Served::Lost(e) => {
                tracing::warn!(target: "botmesh", provider = this.inner.id, error = %e, "IMAP connection lost; reconnecting");
                // Measured from the last time a session searched the mailbox: one that logs in
                // but cannot select (a mailbox that is gone), or is dropped right after its
                // SELECT, counts as down too.
                let since = *down_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= this.config.down_after {
                    this.inner.set_status(TransportStatus::Closed);
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stopped(&mut stop) => return,
                }
                backoff = (backoff * 2).min(this.config.max_backoff);
            }
        }
    }
}

impl Loop {
    /// Selects the mailbox and serves it until told to stop or the connection breaks.
    async fn serve(
        &mut self,
        mut s: ImapSession,
        stop: &mut watch::Receiver<bool>,
        down_since: &mut Option<Instant>,
        backoff: &mut Duration,
    ) -> Served {
        macro_rules! imap {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Served::Lost(e),
                }
            };
        }
        let limit = self.config.command_timeout;
        let mailbox = imap!(timed(limit, "SELECT", s.select(&self.config.mailbox)).await);
        imap!(alive(&s));
        let validity = mailbox.uid_validity.unwrap_or(0);
        let uid_next = mailbox.uid_next.unwrap_or(1);
        let idle = imap!(timed(limit, "CAPABILITY", s.capabilities()).await).has_str("IDLE");
        imap!(alive(&s));
        let mut serving = false;
        let mut start = self.start_at(validity, uid_next).await;
        loop {
            if is_stopped(stop) {
                return Served::Stopped(s);
            }
            let query = match start {
                Start::Unseen => "UNSEEN".to_owned(),
                Start::After(uid) => format!("UID {}:*", uid.saturating_add(1)),
            };
            let floor = match start {
                Start::Unseen => uid_next.saturating_sub(1),
                Start::After(uid) => uid,
            };
            let found = imap!(timed(limit, "SEARCH", s.uid_search(&query)).await);
            imap!(alive(&s));
            if !serving {
                // The session works: selected, and answered a search.
                serving = true;
                *down_since = None;
                *backoff = Duration::from_millis(100);
                self.inner.set_status(TransportStatus::Open);
            }
            let mut uids: Vec<u32> = found
                .into_iter()
                .filter(|u| *u > floor || matches!(start, Start::Unseen))
                .collect();
            uids.sort_unstable();
            let mut reached = floor;
            // In the first pass over the unseen mails the position is recorded once, at the
            // end: a UID recorded halfway would make the next leader skip the unseen mails
            // below it and hand over the seen ones above it. A leader that dies during that
            // pass leaves no position, and the next one starts with the unseen mails again:
            // those handled are flagged `\Seen` by then.
            let each = matches!(start, Start::After(_));
            for uid in uids {
                match self.take(&mut s, Position { validity, uid }, each, stop).await {
                    Ok(true) => reached = reached.max(uid),
                    Ok(false) => return Served::Stopped(s),
                    Err(e) => return Served::Lost(e),
                }
            }
            if matches!(start, Start::Unseen) || reached > floor {
                self.record(Position { validity, uid: reached }).await;
            }
            start = Start::After(reached);
            if arrived(&s) {
                // Mail arrived while these were handed over: search again before waiting.
                continue;
            }
            if idle {
                match self.idle(s, stop).await {
                    Ok(next) => s = next,
                    Err(e) => return Served::Lost(e),
                }
            } else {
                tokio::select! {
                    () = tokio::time::sleep(self.config.poll_interval) => {}
                    () = stopped(stop) => {}
                }
                imap!(timed(limit, "NOOP", s.noop()).await);
                imap!(alive(&s));
            }
        }
    }

    /// Where to start in a mailbox of UIDVALIDITY `validity`.
    async fn start_at(&mut self, validity: u32, uid_next: u32) -> Start {
        let kept = match self.at {
            Some(at) => Some(at),
            None => match self.progress.load().await {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::warn!(target: "botmesh", provider = self.inner.id, error = %e, "reading the IMAP position failed; starting with the unseen mails");
                    None
                }
            },
        };
        match kept {
            Some(at) if at.validity == validity => Start::After(at.uid),
            Some(at) => {
                self.inner.reject(format!(
                    "the UIDVALIDITY of {} changed from {} to {validity}: resuming with the mails not flagged \\Seen",
                    self.config.mailbox, at.validity
                ));
                self.at = None;
                Start::Unseen
            }
            None => match self.config.backlog {
                Backlog::Skip => {
                    let at = Position { validity, uid: uid_next.saturating_sub(1) };
                    self.record(at).await;
                    Start::After(at.uid)
                }
                _ => Start::Unseen,
            },
        }
    }

    /// Records that every mail up to `at` was taken care of.
    async fn record(&mut self, at: Position) {
        if self.at.is_some_and(|old| old.validity == at.validity && old.uid > at.uid) {
            return;
        }
        self.at = Some(at);
        if let Err(e) = self.progress.save(at).await {
            // The next leader offers the mails after the stored position again; the bot's
            // dedupe drops those it had.
            tracing::warn!(target: "botmesh", provider = self.inner.id, error = %e, "recording the IMAP position failed");
        }
    }

    /// Hands mail `at.uid` to the bot, recording `at` once it is taken care of when `record`.
    async fn take(
        &mut self,
        s: &mut ImapSession,
        at: Position,
        record: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, ImapError> {
        let uid = at.uid;
        let limit = self.config.command_timeout;
        let sized: Vec<_> = timed(limit, "FETCH", async {
            s.uid_fetch(uid.to_string(), "RFC822.SIZE").await?.try_collect().await
        })
        .await?;
        alive(s)?;
        let Some(size) = sized.iter().find_map(|f| f.size) else {
            // Expunged since the search: nothing to hand over.
            if record {
                self.record(at).await;
            }
            return Ok(true);
        };
        if size > self.config.max_mail_bytes {
            let reason =
                format!("{size} bytes, over the limit of {} bytes", self.config.max_mail_bytes);
            self.set_aside(s, at, record, "too large", &reason).await?;
            return Ok(true);
        }
        let fetched: Vec<_> = timed(limit, "FETCH", async {
            s.uid_fetch(uid.to_string(), "BODY.PEEK[]").await?.try_collect().await
        })
        .await?;
        alive(s)?;
        let Some(raw) = fetched.iter().find_map(|f| f.body()).map(<[u8]>::to_vec) else {
            if record {
                self.record(at).await;
            }
            return Ok(true);
        };
        let inner = Arc::clone(&self.inner);
        let parsed = match parse(&inner.id, &raw, inner.settings.threading) {
            Ok(parsed) => parsed,
            Err(reason) => {
                self.set_aside(s, at, record, "malformed", &reason).await?;
                return Ok(true);
            }
        };
        if let Err(e) = inner
            .archive
            .keep(parsed.inbound.id.as_str(), parsed.inbound.chat.as_str(), &parsed.kept)
            .await
        {
            tracing::warn!(target: "botmesh", provider = inner.id, error = %e, "keeping a mail for threading failed");
        }
        let mut wait = Duration::from_millis(50);
        loop {
            let verdict = tokio::select! {
                v = self.intake.accept(parsed.inbound.clone()) => v,
                () = stopped(stop) => return Ok(false),
            };
            if verdict.is_taken() {
                break;
            }
            if verdict.status() != 503 {
                inner.reject(format!(
                    "mail {uid} of {} refused by the bot ({verdict}); left unseen",
                    self.config.mailbox
                ));
                if record {
                    self.record(at).await;
                }
                return Ok(true);
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stopped(stop) => return Ok(false),
            }
            wait = (wait * 2).min(Duration::from_secs(5));
        }
        let _: Vec<_> = timed(limit, "STORE", async {
            s.uid_store(uid.to_string(), "+FLAGS.SILENT (\\Seen)").await?.try_collect().await
        })
        .await?;
        alive(s)?;
        if record {
            self.record(at).await;
        }
        Ok(true)
    }

    /// Reports mail `at.uid` as `what` (for `reason`) and leaves it for a person: unseen in
    /// place, or moved to the quarantine folder; records `at` when `record`.
    async fn set_aside(
        &mut self,
        s: &mut ImapSession,
        at: Position,
        record: bool,
        what: &str,
        reason: &str,
    ) -> Result<(), ImapError> {
        let kept = match &self.config.quarantine {
            Some(folder) => {
                let moving = s.uid_mv(at.uid.to_string(), folder);
                match timed(self.config.command_timeout, "MOVE", moving).await.and(alive(s)) {
                    Ok(()) => format!("moved to {folder}"),
                    // The connection is gone: the next session reports the mail again.
                    Err(e @ (ImapError::Io(_) | ImapError::ConnectionLost)) => return Err(e),
                    Err(e) => format!("left unseen (moving it to {folder} failed: {e})"),
                }
            }
            None => "left unseen".to_owned(),
        };
        self.inner.reject(format!(
            "mail {} of {} is {what} ({reason}); {kept} for a person to inspect",
            at.uid, self.config.mailbox
        ));
        if record {
            self.record(at).await;
        }
        Ok(())
    }

    /// Waits in IDLE until the mailbox changes, the IDLE is due for renewal, or the provider
    /// stops; returns the session out of IDLE.
    async fn idle(
        &self,
        s: ImapSession,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<ImapSession, ImapError> {
        // What the server reports while the IDLE command is being answered is queued with the
        // session's unsolicited responses, not returned by the wait: watch the queue too.
        let unsolicited = s.unsolicited_responses.clone();
        let limit = self.config.command_timeout;
        let mut handle = s.idle();
        timed(limit, "IDLE", handle.init()).await?;
        {
            // Dropping `_interrupt` would end the wait: it lives until the select is done.
            let (wait, _interrupt) = handle.wait_with_timeout(self.config.idle_timeout);
            tokio::select! {
                r = wait => { r?; }
                _ = unsolicited.recv() => {}
                () = stopped(stop) => {}
            }
        }
        // Leaving IDLE is where a server that stopped answering during it is noticed.
        let limit = if is_stopped(stop) { limit.min(farewell(&self.inner)) } else { limit };
        timed(limit, "DONE", handle.done()).await
    }
}
