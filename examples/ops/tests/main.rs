//! The demo's tests, one binary: three replicas on a private Redis, and the Grafana dashboard
//! checked against the metrics the runtime records.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod dashboard;
mod replicas;
