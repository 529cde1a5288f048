//! What became of a message handed to the bot directly.

/// What [`Bot::accept`](crate::Bot::accept) and [`Bot::dispatch`](crate::Bot::dispatch) did
/// with a message. A message that could not be taken is an `Err` instead.
///
/// ```
/// use botmesh_core::Accepted;
///
/// let outcome = Accepted::Duplicate;
/// assert!(outcome.is_duplicate());
/// assert!(!outcome.is_queued());
/// // Both outcomes are answered `200`: the message is safe either way.
/// assert_eq!(botmesh_core::traits::Verdict::from(outcome).status(), 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[must_use = "a duplicate was not queued: say so to the sender, or ignore it explicitly"]
pub enum Accepted {
    /// Taken now: it holds its place in its chat's queue (and, with durability, is journaled
    /// once [`Bot::accept`](crate::Bot::accept) returns).
    Queued,
    /// Seen before and taken then: dropped, so that the chat handles it once.
    Duplicate,
}

impl Accepted {
    /// Whether the message was queued now.
    pub const fn is_queued(self) -> bool {
        matches!(self, Self::Queued)
    }

    /// Whether it was dropped as a duplicate.
    pub const fn is_duplicate(self) -> bool {
        matches!(self, Self::Duplicate)
    }
}

impl From<Accepted> for botmesh_traits::Verdict {
    fn from(accepted: Accepted) -> Self {
        match accepted {
            Accepted::Queued => Self::Queued,
            Accepted::Duplicate => Self::Duplicate,
        }
    }
}
