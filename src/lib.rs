//! A GraphQL response cache for Envoy, as a proxy-wasm HTTP filter.
//!
//! The pure core (everything but `host`) builds and is tested natively; `host` is the thin
//! proxy-wasm adapter and exists only in the wasm build.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod bypass;
pub mod canonical;
pub mod classify;
pub mod coalesce;
pub mod config;
pub mod entry;
pub mod fetch;
pub mod hot;
pub mod key;
pub mod memo;
pub mod policy;
pub mod request;
pub mod response;
pub mod rules;
pub mod store;

#[cfg(target_arch = "wasm32")]
mod host;
