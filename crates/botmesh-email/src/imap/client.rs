//! The IMAP commands the session sends, each read up to its tagged answer, which is checked:
//! a server's `NO` or `BAD` is a [`Failure::Refused`], the end of the connection a
//! [`Failure::Lost`], and no answer within the command's deadline a [`Failure::TimedOut`].
//!
//! `async-imap` 0.12 checks the tagged answer of `SELECT`, `LOGIN`, `LOGOUT` and `UID MOVE`,
//! but not that of `CAPABILITY`, `NOOP`, `UID SEARCH`, `UID FETCH` or `UID STORE`: it returns
//! what it read before the answer, so a refusal comes back as an empty success (no mail found,
//! a mail gone, a flag set), and so does the end of the connection. Its IDLE reads past a
//! tagged `NO` to `IDLE` as if it were news, and past a tagged answer that ends the IDLE. So
//! the session sends those commands here, through `async-imap`'s `run_command` and
//! `read_response`, and only `SELECT` and `LOGOUT` go through `async-imap`'s own calls.

use std::time::Duration;

use async_imap::error::Error as ImapError;
use async_imap::imap_proto::{
    AttributeValue, Capability, MailboxDatum, RequestId, Response, Status,
};
use async_imap::types::UnsolicitedResponse;
use tokio::time::Instant;

use super::conn::{self, ImapSession};
use super::failure::{Command, Failure};

/// `command`, within `limit`: past it, [`Failure::TimedOut`].
async fn deadline<T>(
    command: Command,
    limit: Duration,
    run: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::time::timeout(limit, run).await.unwrap_or(Err(Failure::TimedOut { command, limit }))
}

/// Whether `response` tells of new mail.
fn news(response: &Response<'_>) -> bool {
    matches!(response, Response::MailboxData(MailboxDatum::Exists(_) | MailboxDatum::Recent(_)))
}

/// What a selected mailbox is numbered by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Selected {
    pub(crate) validity: u32,
    pub(crate) uid_next: u32,
}

/// How a wait in IDLE ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// The server reported a change.
    Changed,
    /// The wait's deadline passed.
    Timeout,
    /// The server ended the IDLE itself (its tagged `OK`): no `DONE` is due.
    Ended,
}

/// A logged-in IMAP session and what the server reported on the side.
pub(crate) struct Client {
    session: ImapSession,
    /// How long a command may wait for its answer.
    limit: Duration,
    /// Whether the responses read here told of new mail since [`arrived`](Self::arrived).
    news: bool,
}

impl Client {
    /// `session`, each command within `limit`.
    pub(crate) fn new(session: ImapSession, limit: Duration) -> Self {
        Self { session, limit, news: false }
    }

    /// Sends `line` and reads up to its tagged answer, within `limit`; the responses before
    /// it go to `each`, but for those that tell of new mail, which are noted.
    async fn command(
        &mut self,
        command: Command,
        line: &str,
        limit: Duration,
        mut each: impl FnMut(&Response<'_>),
    ) -> Result<(), Failure> {
        let run = async {
            let tag =
                self.session.run_command(line).await.map_err(|e| Failure::lost(command, e))?;
            loop {
                let read = self.session.read_response().await;
                let response = read.map_err(|e| Failure::lost(command, e))?;
                let Some(response) = response else {
                    return Err(Failure::lost(command, ImapError::ConnectionLost));
                };
                match response.parsed() {
                    Response::Done { tag: done, status, outcome } if *done == tag => {
                        return match status {
                            Status::Ok => Ok(()),
                            _ => Err(Failure::answer(command, status, outcome)),
                        };
                    }
                    parsed if news(parsed) => self.news = true,
                    parsed => each(parsed),
                }
            }
        };
        deadline(command, limit, run).await
    }

    /// Selects `mailbox` (`async-imap` checks the answer of `SELECT`).
    pub(crate) async fn select(&mut self, mailbox: &str) -> Result<Selected, Failure> {
        let command = Command::Select;
        let selected = deadline(command, self.limit, async {
            self.session.select(mailbox).await.map_err(|e| Failure::checked(command, e))
        })
        .await?;
        // `async-imap` takes the end of the connection for the end of the answer: a `SELECT`
        // over a closed connection "succeeds".
        if conn::closed(&self.session) {
            return Err(Failure::lost(command, ImapError::ConnectionLost));
        }
        Ok(Selected {
            validity: selected.uid_validity.unwrap_or(0),
            uid_next: selected.uid_next.unwrap_or(1),
        })
    }

    /// Whether the server offers IDLE.
    pub(crate) async fn idle_supported(&mut self) -> Result<bool, Failure> {
        let mut idle = false;
        self.command(Command::Capability, "CAPABILITY", self.limit, |r| {
            if let Response::Capabilities(caps) = r {
                idle |= caps
                    .iter()
                    .any(|c| matches!(c, Capability::Atom(a) if a.eq_ignore_ascii_case("IDLE")));
            }
        })
        .await?;
        Ok(idle)
    }

    /// The UIDs `query` finds (`UID SEARCH`), in no order.
    pub(crate) async fn search(&mut self, query: &str) -> Result<Vec<u32>, Failure> {
        let mut uids = Vec::new();
        let line = format!("UID SEARCH {query}");
        self.command(Command::Search, &line, self.limit, |r| {
            if let Response::MailboxData(MailboxDatum::Search(found)) = r {
                uids.extend_from_slice(found);
            }
        })
        .await?;
        Ok(uids)
    }

    /// Fetches `items` of mail `uid`, giving `read` the attributes of its `FETCH` responses.
    async fn fetch(
        &mut self,
        uid: u32,
        items: &str,
        mut read: impl FnMut(&AttributeValue<'_>),
    ) -> Result<(), Failure> {
        let line = format!("UID FETCH {uid} {items}");
        self.command(Command::Fetch, &line, self.limit, |r| {
            if let Response::Fetch(_, attrs) = r {
                // The server may tell of other mails' flags on the side: only `uid`'s count.
                let other = attrs.iter().any(|a| matches!(a, AttributeValue::Uid(u) if *u != uid));
                if !other {
                    attrs.iter().for_each(&mut read);
                }
            }
        })
        .await
    }

    /// The size of mail `uid` as the server reports it (`RFC822.SIZE`); `None` when the
    /// mailbox no longer holds it.
    pub(crate) async fn size(&mut self, uid: u32) -> Result<Option<u32>, Failure> {
        let mut size = None;
        self.fetch(uid, "RFC822.SIZE", |a| {
            if let AttributeValue::Rfc822Size(n) = a {
                size = Some(*n);
            }
        })
        .await?;
        Ok(size)
    }

    /// Mail `uid` as it was received, without flagging it `\Seen`; `None` when the mailbox no
    /// longer holds it.
    pub(crate) async fn body(&mut self, uid: u32) -> Result<Option<Vec<u8>>, Failure> {
        let mut body = None;
        self.fetch(uid, "BODY.PEEK[]", |a| match a {
            AttributeValue::BodySection { section: None, data: Some(data), .. }
            | AttributeValue::Rfc822(Some(data)) => body = Some(data.to_vec()),
            _ => {}
        })
        .await?;
        Ok(body)
    }

    /// Flags mail `uid` `\Seen`.
    pub(crate) async fn flag_seen(&mut self, uid: u32) -> Result<(), Failure> {
        let line = format!("UID STORE {uid} +FLAGS.SILENT (\\Seen)");
        self.command(Command::Store, &line, self.limit, |_| {}).await
    }

    /// Moves mail `uid` to `folder` (`async-imap` checks the answer of `UID MOVE`, and that
    /// the folder's name can be sent).
    pub(crate) async fn move_to(&mut self, uid: u32, folder: &str) -> Result<(), Failure> {
        let command = Command::Move;
        deadline(command, self.limit, async {
            let moved = self.session.uid_mv(uid.to_string(), folder).await;
            moved.map_err(|e| Failure::checked(command, e))
        })
        .await
    }

    /// Asks the server for news (`NOOP`).
    pub(crate) async fn noop(&mut self) -> Result<(), Failure> {
        self.command(Command::Noop, "NOOP", self.limit, |_| {}).await
    }

    /// Whether the server told of new mail (`EXISTS`, `RECENT`) since the last call, in the
    /// answers to commands; forgets it.
    pub(crate) fn arrived(&mut self) -> bool {
        let mut arrived = std::mem::take(&mut self.news);
        // What `async-imap`'s own calls (`SELECT`) read on the side.
        while let Ok(response) = self.session.unsolicited_responses.try_recv() {
            arrived |=
                matches!(response, UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_));
        }
        arrived
    }

    /// Starts IDLE: sends it and waits for the server's go-ahead, within `limit`. Returns the
    /// command's tag, for [`wait`](Self::wait) and [`done`](Self::done).
    pub(crate) async fn idle(&mut self, limit: Duration) -> Result<RequestId, Failure> {
        let command = Command::Idle;
        deadline(command, limit, async {
            let tag =
                self.session.run_command("IDLE").await.map_err(|e| Failure::lost(command, e))?;
            loop {
                let read = self.session.read_response().await;
                let Some(response) = read.map_err(|e| Failure::lost(command, e))? else {
                    return Err(Failure::lost(command, ImapError::ConnectionLost));
                };
                match response.parsed() {
                    Response::Continue { .. } => return Ok(tag),
                    // Refused, or (`OK`) ended before it began: either way no IDLE to wait in.
                    Response::Done { tag: done, status, outcome } if *done == tag => {
                        return Err(Failure::answer(command, status, outcome));
                    }
                    parsed if news(parsed) => self.news = true,
                    _ => {}
                }
            }
        })
        .await
    }

    /// Waits in the IDLE `tag` until the server reports a change, or `until`. Reads nothing
    /// but the server's responses, so it may be dropped (cancelled) at any point.
    pub(crate) async fn wait(&mut self, tag: &RequestId, until: Instant) -> Result<Woke, Failure> {
        let command = Command::Idle;
        loop {
            let read = tokio::time::timeout_at(until, self.session.read_response()).await;
            let Ok(read) = read else { return Ok(Woke::Timeout) };
            let Some(response) = read.map_err(|e| Failure::lost(command, e))? else {
                return Err(Failure::lost(command, ImapError::ConnectionLost));
            };
            match response.parsed() {
                Response::Done { tag: done, status, outcome } if done == tag => {
                    return match status {
                        Status::Ok => Ok(Woke::Ended),
                        _ => Err(Failure::answer(command, status, outcome)),
                    };
                }
                // Keepalives (`* OK Still here`) and stray continuations.
                Response::Data { status: Status::Ok, .. } | Response::Continue { .. } => {}
                // News (a search follows anyway), or a `* BYE` that `DONE` then finds out.
                _ => return Ok(Woke::Changed),
            }
        }
    }

    /// Leaves the IDLE `tag` (`DONE`) and reads its tagged answer, within `limit`.
    pub(crate) async fn done(&mut self, tag: &RequestId, limit: Duration) -> Result<(), Failure> {
        let command = Command::Done;
        deadline(command, limit, async {
            self.session
                .run_command_untagged("DONE")
                .await
                .map_err(|e| Failure::lost(command, e))?;
            loop {
                let read = self.session.read_response().await;
                let Some(response) = read.map_err(|e| Failure::lost(command, e))? else {
                    return Err(Failure::lost(command, ImapError::ConnectionLost));
                };
                match response.parsed() {
                    Response::Done { tag: done, status, outcome } if done == tag => {
                        return match status {
                            Status::Ok => Ok(()),
                            _ => Err(Failure::answer(command, status, outcome)),
                        };
                    }
                    parsed if news(parsed) => self.news = true,
                    _ => {}
                }
            }
        })
        .await
    }

    /// Logs out within `limit`; past it the connection is dropped.
    pub(crate) async fn logout(mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.session.logout()).await;
    }
}
