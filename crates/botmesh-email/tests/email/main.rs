//! `EmailProvider` against a private Dovecot and an SMTP sink from `botmesh-testing`, through
//! the real IMAP and SMTP clients: a persistent flow by e-mail, three replicas on one mailbox
//! and a failover, malformed mail, a server that refuses commands or freezes, the ingest
//! endpoint, and the provider conformance suite in both modes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod conformance;
mod connection;
mod failover;
mod faults;
mod flow;
mod ingest;
mod logs;
mod mailbox;
mod sending;
mod stall;
mod support;
