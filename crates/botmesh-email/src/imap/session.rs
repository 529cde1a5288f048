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
//! Every IMAP command runs within `command_timeout`, and each answer is checked (see
//! `client.rs`). A command that fails ends the session, which is made again after a pause
//! that doubles up to `max_backoff`, and the failure is logged as a retryable
//! [`Error::Provider`](botmesh_traits::Error::Provider). A command the server refuses (`NO`,
//! `BAD`) is such a failure: what it was to do is done by the next session, since nothing is
//! flagged and no position recorded before the commands it depends on succeeded. A command
//! that takes longer than its timeout is a lost connection (a server or network that stopped
//! answering). In IDLE no command is pending, so the session leaves IDLE every half of
//! `stall_timeout`, and the server must answer within the other half: a server that froze is
//! noticed within `stall_timeout`. The transport closes after `down_after` without a working
//! session. It is reported open, and the clock of `down_after` reset, only once a session
//! searched the mailbox: a server that accepts `SELECT` and then drops every session keeps
//! counting as down. The pause before the next session is short again only once a session
//! handed over every mail it found: a server that refuses every `FETCH` is asked ever less
//! often.

use std::sync::Arc;
use std::time::Duration;

use botmesh_traits::{Intake, ProviderEvent, TransportStatus};
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::{Client, Woke};
use super::conn;
use super::failure::Failure;
use crate::config::{Backlog, ImapConfig};
use crate::parse::parse;
use crate::progress::{Position, Progress};
use crate::state::Inner;

/// The shortest half of `stall_timeout` the session waits in IDLE before it checks that the
/// server answers: a smaller setting would leave and enter IDLE without pause.
const MIN_STALL_HALF: Duration = Duration::from_millis(100);

/// Resolves once the provider is told to stop (or its switch is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn is_stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// How long leaving IDLE and `LOGOUT` may each take when the provider stops: half of the
/// provider's stop timeout, so both fit in it.
fn farewell(inner: &Inner) -> Duration {
    inner.settings.stop_timeout / 2
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
    Stopped(Client),
    /// A command failed: why, and the session.
    Failed(Failure, Client),
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
    first: Client,
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
                    Ok(s) => Client::new(s, this.config.command_timeout),
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
                s.logout(farewell(&this.inner)).await;
                return;
            }
            Served::Failed(failure, s) => {
                let works = failure.connection_works();
                let reason = failure.to_string();
                let op = failure.op();
                let error = failure.into_error(&this.inner.id);
                // An error event for the bot's operators too: the session recovers by itself.
                this.inner.report(ProviderEvent::Failed { op, reason: reason.clone() });
                tracing::warn!(
                    target: "botmesh",
                    provider = this.inner.id,
                    kind = %error.kind().as_str(),
                    recovery = ?error.recovery(),
                    reason,
                    error = %error,
                    "IMAP session failed; connecting again after a pause"
                );
                if works {
                    // Refused, the connection still answering: leave it properly.
                    s.logout(farewell(&this.inner)).await;
                }
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
    /// Selects the mailbox and serves it until told to stop or a command fails.
    async fn serve(
        &mut self,
        mut s: Client,
        stop: &mut watch::Receiver<bool>,
        down_since: &mut Option<Instant>,
        backoff: &mut Duration,
    ) -> Served {
        macro_rules! imap {
            ($e:expr) => {{
                // Bound first: the command's future borrows `s` until the statement ends.
                let done = $e;
                match done {
                    Ok(v) => v,
                    Err(e) => return Served::Failed(e, s),
                }
            }};
        }
        let mailbox = imap!(s.select(&self.config.mailbox).await);
        let idle = imap!(s.idle_supported().await);
        let mut serving = false;
        let mut start = self.start_at(mailbox.validity, mailbox.uid_next).await;
        loop {
            if is_stopped(stop) {
                return Served::Stopped(s);
            }
            let query = match start {
                Start::Unseen => "UNSEEN".to_owned(),
                Start::After(uid) => format!("UID {}:*", uid.saturating_add(1)),
            };
            let floor = match start {
                Start::Unseen => mailbox.uid_next.saturating_sub(1),
                Start::After(uid) => uid,
            };
            let found = imap!(s.search(&query).await);
            if !serving {
                // The session works: selected, and answered a search.
                serving = true;
                *down_since = None;
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
                match imap!(
                    self.take(&mut s, Position { validity: mailbox.validity, uid }, each, stop)
                        .await
                ) {
                    true => reached = reached.max(uid),
                    false => return Served::Stopped(s),
                }
            }
            if matches!(start, Start::Unseen) || reached > floor {
                self.record(Position { validity: mailbox.validity, uid: reached }).await;
            }
            // Every mail found went through: the next failure starts with a short pause again.
            *backoff = Duration::from_millis(100);
            start = Start::After(reached);
            if s.arrived() {
                // Mail arrived while these were handed over: search again before waiting.
                continue;
            }
            if idle {
                imap!(self.idle(&mut s, stop).await);
            } else {
                tokio::select! {
                    () = tokio::time::sleep(self.config.poll_interval) => {}
                    () = stopped(stop) => {}
                }
                imap!(s.noop().await);
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
    /// `false` when told to stop meanwhile.
    async fn take(
        &mut self,
        s: &mut Client,
        at: Position,
        record: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<bool, Failure> {
        let uid = at.uid;
        let Some(size) = s.size(uid).await? else {
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
        let Some(raw) = s.body(uid).await? else {
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
        // A flag the server refuses leaves the position where it is: the next session hands
        // the mail over again, the bot's dedupe drops it, and the flag is set then.
        s.flag_seen(uid).await?;
        if record {
            self.record(at).await;
        }
        Ok(true)
    }

    /// Reports mail `at.uid` as `what` (for `reason`) and leaves it for a person: unseen in
    /// place, or moved to the quarantine folder; records `at` when `record`.
    async fn set_aside(
        &mut self,
        s: &mut Client,
        at: Position,
        record: bool,
        what: &str,
        reason: &str,
    ) -> Result<(), Failure> {
        let kept = match &self.config.quarantine {
            Some(folder) => match s.move_to(at.uid, folder).await {
                Ok(()) => format!("moved to {folder}"),
                // The connection is gone: the next session reports the mail again.
                Err(e) if !e.connection_works() => return Err(e),
                Err(e) => format!("left unseen (moving it to {folder} failed: {e})"),
            },
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

    /// Waits in IDLE until the mailbox changes, the IDLE is due for renewal or for a check
    /// that the server still answers, or the provider stops; leaves IDLE.
    async fn idle(&self, s: &mut Client, stop: &mut watch::Receiver<bool>) -> Result<(), Failure> {
        // A server that froze during IDLE is noticed within `stall_timeout`: the session waits
        // half of it, and the server must answer `DONE` (and `IDLE`) within the other half.
        let half = (self.config.stall_timeout / 2).max(MIN_STALL_HALF);
        let answer = self.config.command_timeout.min(half);
        let tag = s.idle(answer).await?;
        if s.arrived() {
            // Mail came with the server's go-ahead: leave at once, to search.
            return s.done(&tag, answer).await;
        }
        let until = Instant::now() + self.config.idle_timeout.min(half);
        let woke = tokio::select! {
            woke = s.wait(&tag, until) => Some(woke?),
            () = stopped(stop) => None,
        };
        if woke == Some(Woke::Ended) {
            return Ok(());
        }
        let limit = if is_stopped(stop) { answer.min(farewell(&self.inner)) } else { answer };
        s.done(&tag, limit).await
    }
}
