//! A GraphQL response cache for Envoy, as a proxy-wasm HTTP filter.
//!
//! Read in the order a request goes: `config` (loaded once; a leaf that imports nothing else from
//! the crate: the types it parses into, such as rules and key fields, are its own), `request` (the
//! GraphQL request and its key), `cache` (what is stored, where), `coalesce` (one fetch per key
//! across workers), `fleet` (many Envoys sharing one cache through the L2 service), `worker` (the
//! decisions of one Envoy worker, callback by callback), `effects` (the host as the core sees it).
//! Everything but `host` builds and is tested natively; `host` is the thin proxy-wasm adapter and
//! exists only in the wasm build.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod cache;
pub mod coalesce;
pub mod config;
pub mod effects;
pub mod fast_hash;
pub mod fleet;
pub mod invalidate;
pub mod request;
pub mod worker;

#[cfg(target_arch = "wasm32")]
mod host;
