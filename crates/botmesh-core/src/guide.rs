//! Guides to the runtime's behaviour across messages, replicas and time.
//!
//! Each module is one guide, written in the crate's `guide/` folder, with its examples compiled
//! and run as doc tests. Running the bot as several replicas is
//! [`botmesh-coord`'s guide](https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html);
//! each provider crate has a guide of its own.

// The link definitions before each guide point its links at these docs; the guide's own, at
// its end, point GitHub readers at the files next to it. The first definition of a name wins.

pub mod handover {
    #![doc = "[replicas]: https://docs.rs/botmesh-coord/latest/botmesh_coord/guide/index.html"]
    #![doc = "[`Handover`]: crate::Handover"]
    #![doc = "[`Bot::accept`]: crate::Bot::accept"]
    #![doc = include_str!("../guide/handover.md")]
}

pub mod leaving {
    #![doc = include_str!("../guide/leaving.md")]
}

pub mod scheduler {
    #![doc = include_str!("../guide/scheduler.md")]
}

pub mod migrating {
    #![doc = include_str!("../guide/migrating.md")]
}
