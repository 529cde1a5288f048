//! `TelegramProvider` against the Bot API stand-in of `botmesh-testing`, through the real
//! teloxide client: the mapping, polling and its failover, webhooks behind a balancer, and the
//! provider conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod conformance;
mod mapping;
mod polling;
mod support;
mod webhooks;
