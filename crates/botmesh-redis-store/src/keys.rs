//! How botmesh names its Redis keys, in the two layouts.
//!
//! Every key starts with the prefix given to [`RedisStore`](crate::RedisStore) (`P` below).
//! The store's data and the coordination's live apart: the coordinator's keys are under
//! `P:coord`, so an operator can tell them apart, size them, or grant them separately.
//! In the cluster layout the part in braces is the hash tag; the standalone layout has no
//! braces.
//!
//! | Key (standalone) | Key (cluster) | Type | What |
//! |---|---|---|---|
//! | `P:chat:<chat>` | `{P:chat:<chat>}` | string | a chat's record (JSON) |
//! | `P:user:<key>` | `{P:user:<key>}` | string | a user's data (JSON) |
//! | `P:cp:<key>` | `{P:cp:<key>}` | hash | a chat's checkpoint: data and revision |
//! | `P:lock:<key>` | `{P:lock:<key>}` | string | a fenced lock's token |
//! | `P:lease:<name>` | `{P:lease:<name>}` | string | a store lease's holder |
//! | `P:task:<id>` | `{P:task:<id>}` | string | a scheduled job's last occurrence |
//! | `P:inbox:r:<id>` | `{P:inbox}:r:<id>` | hash | a journaled message |
//! | `P:inbox:out:<key>` | `{P:inbox}:out:<key>` | string | an outbox mark (a send made once): `1` |
//! | `P:inbox:pending` | `{P:inbox}:pending` | sorted set | journaled messages not acknowledged |
//! | `P:inbox:seq` | `{P:inbox}:seq` | string | the journal's arrival counter |
//! | `P:coord:t:<chat>` | `{P:coord:sN}:t:<chat>` | hash | a chat's turn: holder, fence |
//! | `P:coord:q:<chat>` | `{P:coord:sN}:q:<chat>` | sorted set | a chat's queued tickets |
//! | `P:coord:r:<incarnation>` | `{P:coord:sN}:r:<incarnation>` | string | a replica's liveness, with a TTL of its lease |
//! | `P:coord:l:<name>` | `{P:coord:sN}:l:<name>` | hash | a leadership (an exclusive transport) |
//! | `P:coord:replicas:index` | `{P:coord:replicas}:index` | sorted set | the replicas' status documents |
//! | `P:coord:replicas:doc:<incarnation>` | `{P:coord:replicas}:doc:<incarnation>` | hash | one replica's status document |
//! | `P:coord:wake:<incarnation>` | `P:coord:wake:<incarnation>` | channel | turns handed to a replica |
//!
//! `sN` is one of 16 shards a chat key or a leadership name hashes to (FNV-1a), so that one
//! heartbeat per shard renews a replica's liveness whatever the number of chats it holds.
//! A chat's ticket numbers and fences are fields of its turn hash; idle turn state expires
//! on its own (`idle_keep`), and a hash created again starts its counters from the server's
//! clock, above every value the old one handed out.

use crate::call::Concat;

/// How keys are laid out over Redis.
///
/// In a configuration file (`serde` feature): `"standalone"` or `"cluster"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum KeyLayout {
    /// One Redis server (with or without replicas and Sentinel).
    #[default]
    Standalone,
    /// Redis Cluster: every key one script touches carries the same hash tag, so no script
    /// crosses slots. Chats are spread over a fixed number of shards (hash tags), and a
    /// replica's liveness key exists once per shard, so its heartbeat is one command per shard
    /// whatever the number of chats it holds.
    Cluster,
}

/// How many hash tags chat coordination keys are spread over in the cluster layout.
pub(crate) const CLUSTER_SHARDS: u32 = 16;

/// The key namer of one prefix and layout.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
    layout: KeyLayout,
}

/// FNV-1a: a stable spread of ids over shards (the same on every replica and version).
fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

impl Keys {
    pub(crate) fn new(prefix: &str, layout: KeyLayout) -> Self {
        Self { prefix: prefix.to_owned(), layout }
    }

    pub(crate) fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// The namer of the coordination's keys: the same layout, under `prefix:coord`.
    pub(crate) fn coordination(&self) -> Self {
        Self::new(&format!("{}:coord", self.prefix), self.layout)
    }

    /// The key of one stored entity (a checkpoint, a lock), tagged on its own in a cluster.
    pub(crate) fn entity(&self, kind: &str, id: &str) -> String {
        match self.layout {
            KeyLayout::Standalone => format!("{}:{kind}:{id}", self.prefix),
            KeyLayout::Cluster => format!("{{{}:{kind}:{id}}}", self.prefix),
        }
    }

    /// What every inbox key starts with: the inbox's keys share one tag, so that appends check
    /// for the id and index it atomically.
    pub(crate) fn inbox_base(&self) -> String {
        match self.layout {
            KeyLayout::Standalone => format!("{}:inbox:", self.prefix),
            KeyLayout::Cluster => format!("{{{}:inbox}}:", self.prefix),
        }
    }

    /// A journaled message's record, as a script argument under `base` (see
    /// [`inbox_base`](Self::inbox_base)).
    pub(crate) fn record_arg<'a>(base: &'a str, id: &'a str) -> Concat<'a, 3> {
        Concat([base, "r:", id])
    }

    /// An outbox entry, as a script argument under `base` (see [`inbox_base`](Self::inbox_base)):
    /// under the inbox's tag, so that claims batch with the journal's writes.
    pub(crate) fn outbox_arg<'a>(base: &'a str, key: &'a str) -> Concat<'a, 3> {
        Concat([base, "out:", key])
    }

    /// An inbox key.
    pub(crate) fn inbox(&self, what: &str) -> String {
        let mut key = self.inbox_base();
        key.push_str(what);
        key
    }

    /// An outbox entry (see [`outbox_arg`](Self::outbox_arg)).
    pub(crate) fn outbox(&self, key: &str) -> String {
        Self::outbox_arg(&self.inbox_base(), key).to_string()
    }

    /// The shard tag of a chat key or a leadership name.
    pub(crate) fn shard(&self, id: &str) -> String {
        match self.layout {
            KeyLayout::Standalone => self.prefix.clone(),
            KeyLayout::Cluster => format!("{{{}:s{}}}", self.prefix, fnv(id) % CLUSTER_SHARDS),
        }
    }

    /// Every shard tag, for heartbeats.
    pub(crate) fn shards(&self) -> Vec<String> {
        match self.layout {
            KeyLayout::Standalone => vec![self.prefix.clone()],
            KeyLayout::Cluster => {
                (0..CLUSTER_SHARDS).map(|n| format!("{{{}:s{n}}}", self.prefix)).collect()
            }
        }
    }

    /// A chat's turn state (hash) and ticket queue (sorted set).
    pub(crate) fn turn(&self, key: &str) -> (String, String) {
        let tag = self.shard(key);
        let (state, queue) = Self::turn_args(&tag, key);
        (state.to_string(), queue.to_string())
    }

    /// A chat's turn state and ticket queue as script arguments, in its shard `tag`.
    pub(crate) fn turn_args<'a>(tag: &'a str, key: &'a str) -> (Concat<'a, 3>, Concat<'a, 3>) {
        (Concat([tag, ":t:", key]), Concat([tag, ":q:", key]))
    }

    /// The prefix of the liveness keys in `tag`; the incarnation follows.
    pub(crate) fn alive_prefix(tag: &str) -> String {
        format!("{tag}:r:")
    }

    /// A leadership's hash.
    pub(crate) fn lead(&self, name: &str) -> String {
        format!("{}:l:{name}", self.shard(name))
    }

    /// The replicas' status documents and their index share one tag: a publish writes both
    /// atomically, and one script reads them all.
    fn replicas(&self, what: &str) -> String {
        match self.layout {
            KeyLayout::Standalone => format!("{}:replicas:{what}", self.prefix),
            KeyLayout::Cluster => format!("{{{}:replicas}}:{what}", self.prefix),
        }
    }

    /// The index of the replicas' status documents: a sorted set of incarnations, each scored
    /// by the server time (ms) at which its document's keep ends.
    pub(crate) fn replica_index(&self) -> String {
        self.replicas("index")
    }

    /// The prefix of the replicas' status documents (hashes); the incarnation follows.
    pub(crate) fn replica_doc_prefix(&self) -> String {
        self.replicas("doc:")
    }

    /// The prefix of the pub/sub channels that hand turns over: one channel per incarnation.
    pub(crate) fn wake_prefix(&self) -> String {
        format!("{}:wake:", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_keys_of_one_chat_share_a_hash_tag_with_the_liveness_keys() {
        let k = Keys::new("shop", KeyLayout::Cluster);
        let (state, queue) = k.turn("chat-42");
        let tag = k.shard("chat-42");
        assert!(state.starts_with(&tag) && queue.starts_with(&tag));
        assert!(k.shards().contains(&tag));
        assert_eq!(k.entity("cp", "c1"), "{shop:cp:c1}");
    }

    #[test]
    fn cluster_keys_of_the_replica_statuses_share_a_hash_tag() {
        let k = Keys::new("shop", KeyLayout::Cluster);
        assert_eq!(k.replica_index(), "{shop:replicas}:index");
        assert_eq!(format!("{}abc", k.replica_doc_prefix()), "{shop:replicas}:doc:abc");
        let k = Keys::new("shop", KeyLayout::Standalone);
        assert_eq!(k.replica_index(), "shop:replicas:index");
        assert_eq!(k.replica_doc_prefix(), "shop:replicas:doc:");
    }

    #[test]
    fn coordination_keys_live_apart_from_the_store_s() {
        let store = Keys::new("shop", KeyLayout::Standalone);
        let coord = store.coordination();
        assert_eq!(coord.turn("c").0, "shop:coord:t:c");
        assert_eq!(coord.wake_prefix(), "shop:coord:wake:");
        assert_eq!(coord.replica_index(), "shop:coord:replicas:index");
        let cluster = Keys::new("shop", KeyLayout::Cluster).coordination();
        assert!(cluster.turn("c").0.starts_with("{shop:coord:s"));
        assert_eq!(cluster.replica_index(), "{shop:coord:replicas}:index");
        assert!(!store.entity("cp", "c").starts_with("shop:coord:"));
    }

    #[test]
    fn standalone_keys_are_plain() {
        let k = Keys::new("shop", KeyLayout::Standalone);
        assert_eq!(k.turn("c").0, "shop:t:c");
        assert_eq!(k.shards(), ["shop"]);
        assert_eq!(k.entity("cp", "c1"), "shop:cp:c1");
    }
}
