//! `WhatsAppWebProvider` against the phone network stand-in of `botmesh-testing`, through the
//! provider's client seam: the mapping both ways, pairing, the session's lock and its
//! failover between replicas, log-outs, acknowledgements, and the provider conformance suite.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed expectation is a failed test"
)]

mod conformance;
mod in_store;
mod mapping;
mod outbound;
#[cfg(feature = "whatsapp-rust")]
mod redis_session;
mod replicas;
mod session;
mod support;
