//! SQL stores for botmesh, on sqlx.
//!
//! `PostgresStore`, `MySqlStore` and `SqliteStore` implement every [`Store`](botmesh_traits::Store) method. Every
//! compare-and-set is one statement: a conditional `UPDATE` or an
//! `INSERT ... ON CONFLICT ... WHERE`, so two replicas racing one revision cannot both win.
//! Fences (of locks and leases) and checkpoint revisions are counted by the database, not the
//! client, and rows are never deleted when cleared, so a revision never repeats. Times to
//! live are compared with the database's clock.
//!
//! The schema is embedded and applied on connect under an advisory lock, so replicas starting
//! together apply it once; a schema from a newer version of this crate is refused.
//!
//! # Feature flags
//!
//! - `postgres` (default): `PostgresStore`.
//! - `sqlite` (default): `SqliteStore`, a file or in memory, for one process.
//! - `mysql` (default): `MySqlStore`, for MySQL and MariaDB.
//! - `serde`: the options types deserialize from configuration files, with durations as text
//!   (`acquire_timeout = "5s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(all(feature = "serde", any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
mod config;
#[cfg(feature = "postgres")]
mod postgres;

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "mysql")]
pub use mysql::{MySqlOptions, MySqlStore};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore};

/// The `state` column of an inbox row (`'acked'` or `'pending'`) as the journal's state.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn inbox_state(state: Option<&str>) -> botmesh_traits::InboxState {
    if state == Some("acked") {
        botmesh_traits::InboxState::Acked
    } else {
        botmesh_traits::InboxState::Pending
    }
}

/// An inbox row as a record: `(key, payload, owner, state)` as the `SELECT`s of every dialect
/// return them.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn inbox_record(
    id: &str,
    (key, payload, owner, state): (String, String, String, String),
) -> botmesh_traits::InboxRecord {
    botmesh_traits::InboxRecord::pending(id, key, payload, owner)
        .with_state(inbox_state(Some(&state)))
}

/// The most ids one statement acknowledges: a batch goes in statements of this many.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
const ACK_CHUNK: usize = 256;

/// `n` placeholders, `?, ?, …`, for an `IN (…)` list.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
fn placeholders(n: usize) -> String {
    let mut list = "?, ".repeat(n);
    list.truncate(list.len().saturating_sub(2));
    list
}

/// A pending inbox row as a record: `(id, key, payload, owner)`.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn pending_record(
    (id, key, payload, owner): (String, String, String, String),
) -> botmesh_traits::InboxRecord {
    botmesh_traits::InboxRecord::pending(id, key, payload, owner)
}
