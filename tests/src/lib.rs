//! Nothing but the repository README's Rust example, compiled as a doc test: a published crate
//! cannot include a file outside its directory, and this package is not published. The
//! cross-crate integration suite is the `integration` test (`integration/main.rs`).

/// The repository's README.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
