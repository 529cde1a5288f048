//! How botmesh names its Redis keys, in the two layouts.

/// How keys are laid out over Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

    /// The key of one stored entity (a checkpoint, a lock), tagged on its own in a cluster.
    pub(crate) fn entity(&self, kind: &str, id: &str) -> String {
        match self.layout {
            KeyLayout::Standalone => format!("{}:{kind}:{id}", self.prefix),
            KeyLayout::Cluster => format!("{{{}:{kind}:{id}}}", self.prefix),
        }
    }

    /// The inbox's keys share one tag: appends check for the id and index it atomically.
    pub(crate) fn inbox(&self, what: &str) -> String {
        match self.layout {
            KeyLayout::Standalone => format!("{}:inbox:{what}", self.prefix),
            KeyLayout::Cluster => format!("{{{}:inbox}}:{what}", self.prefix),
        }
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
        (format!("{tag}:t:{key}"), format!("{tag}:q:{key}"))
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
    fn standalone_keys_are_plain() {
        let k = Keys::new("shop", KeyLayout::Standalone);
        assert_eq!(k.turn("c").0, "shop:t:c");
        assert_eq!(k.shards(), ["shop"]);
        assert_eq!(k.entity("cp", "c1"), "shop:cp:c1");
    }
}
