//! The IMAP side: connecting (`conn.rs`), the commands and their checked answers
//! (`client.rs`, failures in `failure.rs`) and the session loop (`session.rs`).

pub(crate) mod client;
pub(crate) mod conn;
pub(crate) mod failure;
pub(crate) mod session;
