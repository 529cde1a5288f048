//! A MongoDB store for botmesh, on the official `mongodb` driver.
//!
//! [`MongoStore`] implements every [`Store`](botmesh_traits::Store) method. MongoDB is used
//! only through single-document atomic operations, so the store needs no transactions and
//! works on a standalone server, a replica set or a sharded cluster alike:
//!
//! - A checkpoint compare-and-set is one `findAndModify` whose filter names the expected
//!   revision (`$inc` computes the next one); a create is an upsert that matches only an empty
//!   or expired document, and that the `_id` index refuses (duplicate key, code 11000) when a
//!   live one exists. Clearing one is a conditional update to an empty document: documents of
//!   checkpoints, locks and leases are never deleted, so their counters never restart.
//! - Lock and lease fences are counted by the database (`$inc` in the same `findAndModify`
//!   that grants the lock).
//! - The inbox journal and the outbox key their documents by message id and send key, so two
//!   replicas racing one id insert it once: the loser's insert is refused as a duplicate.
//!   The journal's order is a counter in the database.
//! - Times to live are judged on the server's clock, read from the `hello` reply's
//!   `localTime` on connect and once a minute (MongoDB has no server-side "now" outside
//!   aggregation expressions, which the test server cannot evaluate). Expired documents are
//!   treated as missing by every filter; TTL indexes only clean up the inbox and the outbox.
//!
//! The schema (a set of indexes) is versioned in the `{prefix}meta` collection and created on
//! connect (opt out with [`MongoOptions::migrate`]); several replicas may start at once, and a
//! database whose schema a newer version of this crate wrote is refused.
//!
//! # What was verified, and against what
//!
//! No real `mongod` can run on the machines this crate is developed on. Its tests run the real
//! `mongodb` driver against a wire-protocol server from PyPI: `mockupdb` for the protocol and
//! `mongomock` for the semantics of filters and update operators, with one lock around every
//! command (`botmesh-testing`'s `MongoServer`). Verified there: the whole store conformance
//! suite, eight writers on two clients racing one revision for 1,000 rounds with exactly one
//! winner each round, several replicas creating the indexes at once, and the errors for a bad
//! URL, an unreachable server and a newer schema.
//!
//! Not verified against MongoDB itself: `mongod`'s own concurrency (its document-level locking
//! and the automatic retry of upserts that hit a duplicate key), replica sets, failover and
//! retryable writes, write and read concerns (set them in the URL, such as `w=majority`; a
//! fence is only as durable as the write concern that stored it), sharded clusters, TLS and
//! authentication, TTL monitor timing, and the real `localTime` the clock reads.
//!
//! # Feature flags
//!
//! - `dns-srv` (default): `mongodb+srv://` URLs, resolved through DNS SRV and TXT records.
//! - `serde`: [`MongoOptions`] deserializes from configuration files, with durations as text
//!   (`connect_timeout = "5s"`).
//!
//! # Example
//!
//! ```no_run
//! use botmesh_mongo_store::{MongoOptions, MongoStore};
//!
//! # async fn run() -> botmesh_traits::Result<()> {
//! let store = MongoStore::connect(
//!     MongoOptions::new("mongodb://127.0.0.1:27017/?replicaSet=rs0&w=majority")
//!         .database("shop")
//!         .max_pool_size(20),
//! )
//! .await?;
//! # let _ = store; Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
#[cfg(feature = "serde")]
mod config;
mod options;
mod schema;
mod store;
mod write;

pub use options::MongoOptions;
pub use store::MongoStore;
