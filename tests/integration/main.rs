//! The cross-crate integration suite: bots driven through `TestProvider`, on real stores.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod conversations;
mod dispatch;
mod flows;
mod persistence;
mod redis_faults;
mod replicas;
mod robustness;
mod shop;
mod stores;
mod support;
