//! The wire contract between the GraphQL cache filter (`graphql-cache`, a proxy-wasm filter in
//! every Envoy) and the fleet's L2 service (`graphql-cache-l2`, in front of Redis).
//!
//! Why a crate of its own: the two sides are built apart (the filter for wasm32-wasip1, the
//! service natively with tokio and axum) and deployed apart, yet they must agree on every byte
//! that goes between them. Written twice, a route, a header, a limit or a JSON shape drifts on
//! one side and the fleet fails at run time; written here once, both sides build against the same
//! definition and a change to the contract is a change to this crate. It depends on no runtime, no
//! HTTP stack and no proxy-wasm ABI, so either side can use all of it.
//!
//! - [`route`]: the paths, their query parameters, and the request paths the filter sends;
//! - [`header`] and [`content_type`]: the header names and values both sides read or write;
//! - [`limits`]: the bounds the service enforces and the filter keeps within, and the checks of
//!   the values that go back into a path;
//! - the envelopes: [`batch`] (the binary bodies of `POST /v1/mget` and `PUT /v1/mstore`,
//!   entity mode's batch verbs), [`lookup`] (`x-l2: hit | lead | busy`), [`purge`] (the binary purge record
//!   one Envoy writes and the others read through the log), [`purges`] (the JSON answers of
//!   `POST /v1/purge` and `GET /v1/purges`), [`marks`] (`POST /v1/marks` and `GET /v1/marks`:
//!   purges as per-target marks, and the snapshot beside the log).
//!
//! Everything that decodes reads bytes from the network: it answers a typed [`DecodeError`] for
//! anything that is not exactly what the contract describes, and never panics.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod batch;
pub mod error;
pub mod limits;
pub mod lookup;
pub mod marks;
pub mod purge;
pub mod purges;
pub mod route;

pub use error::DecodeError;

/// Header names of the contract (lower case, as both HTTP/2 and Envoy's callout API carry them).
pub mod header {
    /// On every `POST /v1/lookup` answer: a [`crate::lookup::LookupTag`].
    pub const X_L2: &str = "x-l2";
    /// On a hit: the value's remaining TTL in Redis, in ms.
    pub const X_L2_TTL_MS: &str = "x-l2-ttl-ms";
    /// The `authorization` scheme the service accepts (case-insensitively), the secret after it.
    pub const BEARER: &str = "Bearer ";
}

/// Content types of the contract's bodies.
pub mod content_type {
    /// Opaque bytes: a store's body (a sealed entry), a purge's body (a sealed record), a hit.
    pub const BYTES: &str = "application/octet-stream";
    /// The answers of `POST /v1/purge` and `GET /v1/purges`.
    pub const JSON: &str = "application/json";
}
