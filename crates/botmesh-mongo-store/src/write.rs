//! Writes that MongoDB may refuse with a duplicate key, shared by the store and its schema
//! setup.

use mongodb::Collection;
use mongodb::bson::Document;
use mongodb::error::{ErrorKind, WriteFailure};

/// MongoDB's code for a write that a unique index refused.
const DUPLICATE_KEY: i32 = 11000;

/// Whether `e` is a duplicate-key refusal: the document is already there.
pub(crate) fn is_duplicate(e: &mongodb::error::Error) -> bool {
    match &*e.kind {
        ErrorKind::Command(c) => c.code == DUPLICATE_KEY,
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == DUPLICATE_KEY,
        _ => false,
    }
}

/// An update with upsert. One that a concurrent insert of the same `_id` beat is tried once
/// more: the second attempt finds the document and updates it.
pub(crate) async fn upsert(
    coll: &Collection<Document>,
    filter: Document,
    update: Document,
) -> mongodb::error::Result<()> {
    match coll.update_one(filter.clone(), update.clone()).upsert(true).await {
        Err(e) if is_duplicate(&e) => coll.update_one(filter, update).upsert(true).await.map(drop),
        other => other.map(drop),
    }
}
