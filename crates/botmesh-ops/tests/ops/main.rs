//! The operations routes of replicas on the in-memory hub: the probes and the status page
//! (also in a real browser), and one span per message. The metrics have a test binary of
//! their own (`tests/metrics.rs`): the recorder is the process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod routes;
mod spans;
mod status_page;
mod support;
