//! The cross-crate integration suite: bots driven through `TestProvider`, on real stores.

mod conversations;
mod dispatch;
mod flows;
mod persistence;
mod robustness;
mod shop;
mod stores;
mod support;
