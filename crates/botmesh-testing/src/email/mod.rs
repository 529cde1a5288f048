//! E-mail test servers (feature `email`): a private Dovecot IMAP server, a proxy to put in
//! front of it that injects faults (a refused command, a frozen connection), and an SMTP sink,
//! so that an e-mail bot's real IMAP and SMTP clients run in tests.
//!
//! ```no_run
//! use botmesh_testing::email::{DovecotServer, SmtpSink};
//!
//! # async fn demo() -> std::io::Result<()> {
//! let imap = DovecotServer::start()?;
//! let smtp = SmtpSink::start().await?;
//! imap.deliver(b"From: ana@example.org\r\nTo: bot@example.org\r\nSubject: hi\r\n\r\nhello\r\n")?;
//! // ... point the bot's IMAP settings at imap.port(), its SMTP at smtp.port() ...
//! assert!(smtp.texts_to("ana@example.org").is_empty());
//! # Ok(()) }
//! ```

mod dovecot;
mod proxy;
mod smtp_sink;

pub use dovecot::{DovecotServer, PASSWORD, SessionWatch, USER};
pub use proxy::ImapProxy;
pub use smtp_sink::{SentMail, SmtpSink};
