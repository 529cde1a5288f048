//! The IMAP side: connecting (`conn.rs`) and the session loop (`session.rs`).

pub(crate) mod conn;
pub(crate) mod session;
