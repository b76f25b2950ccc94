//! A GraphQL response cache for Envoy, as a proxy-wasm HTTP filter.
//!
//! Where to look first:
//! - the key is built in `request::key::build_key` (from the canonical operation, `request::canonical`);
//! - who decides a follower may share a leader's answer: `coalesce::sharing::followers_may_share`;
//! - a purge is applied by `worker::marks::mark`, the one path for the purge API,
//!   mutations and the fleet's purge log (`worker::l2::feed`), onto the marks of
//!   `invalidate::marks`;
//! - the L2 is asked by `worker::l2::ask::ask` (its wire format: `fleet::wire`; what a value
//!   must be to be used: `fleet::seal` and `cache::peer`);
//! - entity mode (a filter in front of subgraphs): `entities` splits an `_entities` request and
//!   merges a subgraph's answer; `worker::request::entities` looks each entity up and fetches the
//!   missing ones;
//! - JSON the filter reads itself (request bodies, representations, answers for their tags):
//!   `json`, a leaf like `fast_hash`;
//! - a configuration field is validated in the `config/` file named for its concern (`config::l2`,
//!   `config::purge`, `config::headers`, ...); `config::Config::from_raw` only assembles.
//!
//! Read in the order a request goes: `config` (loaded once; a leaf that imports nothing else from
//! the crate: the types it parses into, such as rules and key fields, are its own), `request` (the
//! GraphQL request and its key), `cache` (what is stored, where), `coalesce` (one fetch per key
//! across workers), `fleet` (many Envoys sharing one cache through the L2 service), `worker` (the
//! decisions of one Envoy worker, callback by callback: `worker::request` for a request's
//! callbacks, `worker::root` for the root context's, `worker::l2` for the fleet L2, each run with
//! a `worker::ctx::Ctx`), `effects` (the host as the core sees it).
//! Everything but `host` builds and is tested natively; `host` is the thin proxy-wasm adapter and
//! exists only in the wasm build.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod cache;
pub mod coalesce;
pub mod config;
pub mod effects;
pub mod entities;
pub mod fast_hash;
pub mod fleet;
pub mod invalidate;
pub mod json;
pub mod request;
pub mod whatif;
pub mod worker;

#[cfg(target_arch = "wasm32")]
mod host;
