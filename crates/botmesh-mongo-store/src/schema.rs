//! The store's schema: which indexes each version adds, and the version recorded in the
//! database.
//!
//! MongoDB collections need no table definitions, so a schema version is a set of indexes.
//! The version lives in the `{prefix}meta` collection as `{ _id: "schema", version: N }`.

use std::time::Duration;

use botmesh_traits::{BoxError, Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::options::IndexOptions;
use mongodb::{Collection, Database, IndexModel};

use crate::write::upsert;

/// The `_id` of the document that records the schema version.
const SCHEMA_DOC: &str = "schema";

/// One index of a schema version: the collection (without prefix), its name, its keys, and
/// whether documents expire once the (date) key is in the past.
struct Index {
    collection: &'static str,
    name: &'static str,
    keys: fn() -> Document,
    ttl: bool,
}

/// The schema, one entry per version. Applied in order; never edit a released entry.
const VERSIONS: &[&[Index]] = &[&[
    // `inbox_pending`: pending records in journal order.
    Index {
        collection: "inbox",
        name: "pending_by_seq",
        keys: || doc! { "state": 1, "seq": 1 },
        ttl: false,
    },
    // Acknowledged ids past their retention are removed by the server.
    Index {
        collection: "inbox",
        name: "forget_at_ttl",
        keys: || doc! { "forget_at": 1 },
        ttl: true,
    },
    // Expired send claims are removed by the server.
    Index {
        collection: "outbox",
        name: "expires_at_ttl",
        keys: || doc! { "expires_at": 1 },
        ttl: true,
    },
]];

/// The newest version this crate knows.
pub(crate) const CURRENT: usize = VERSIONS.len();

fn db(e: mongodb::error::Error) -> Error {
    Error::store("migrate", e)
}

/// The version recorded in the database (0 when none is), refused if it is newer than this
/// crate knows.
pub(crate) async fn check(meta: &Collection<Document>) -> Result<usize> {
    let found = meta.find_one(doc! { "_id": SCHEMA_DOC }).await.map_err(db)?;
    let version = match found.as_ref().and_then(|d| d.get("version")) {
        None => 0,
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_i32().map(i64::from))
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| Error::corrupt("MongoDB schema document", "version is not a number"))?,
    };
    if version > CURRENT {
        return Err(Error::Configuration(BoxError::from(format!(
            "the database schema is at version {version}, newer than this botmesh-mongo-store knows ({CURRENT})"
        ))));
    }
    Ok(version)
}

/// Creates the indexes of the versions after the recorded one, then records the newest.
pub(crate) async fn migrate(
    database: &Database,
    meta: &Collection<Document>,
    prefix: &str,
) -> Result<()> {
    let recorded = check(meta).await?;
    for index in VERSIONS.iter().skip(recorded).flat_map(|v| v.iter()) {
        let mut options = IndexOptions::builder().name(index.name.to_owned()).build();
        if index.ttl {
            options.expire_after = Some(Duration::ZERO);
        }
        let model = IndexModel::builder().keys((index.keys)()).options(options).build();
        database
            .collection::<Document>(&format!("{prefix}{}", index.collection))
            .create_index(model)
            .await
            .map_err(db)?;
    }
    let version = i64::try_from(CURRENT).unwrap_or(i64::MAX);
    // `$max`: a replica that raced a newer one never lowers the recorded version.
    upsert(meta, doc! { "_id": SCHEMA_DOC }, doc! { "$max": { "version": version } })
        .await
        .map_err(db)
}
