//! The cross-crate integration suite: bots driven through `TestProvider`, on real stores.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

#[macro_use]
mod backends;
mod config;
mod conversations;
mod delivered_once;
mod dispatch;
mod durable_redis;
mod exits;
mod flows;
mod footprint;
mod handover;
mod leases;
mod persistence;
mod promises_defaults;
mod promises_handover;
mod promises_transport;
mod providers;
mod reads;
mod redis_faults;
mod replicas;
mod resume;
mod robustness;
mod scheduler;
mod shop;
mod stop;
mod stores;
mod support;
