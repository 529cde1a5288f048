//! `DiscordProvider` against the Discord stand-in of `botmesh-testing`, through the real
//! serenity client: the mapping both ways, the gateway's sessions across replicas, and the
//! provider conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod conformance;
mod gateway;
mod handing;
mod mapping;
mod replicas;
mod stopping;
mod support;
