//! Entity caching on the gateway-to-subgraph hop: a federation `_entities` request split into
//! one cache entry per representation, answered from the entries that exist, the rest fetched
//! with only the missing representations and merged back in the gateway's order.
//!
//! Pure: `request` reads and splits a request and rewrites it for the misses; `answer` reads a
//! subgraph's answer, says which entities may be stored, and assembles what the client gets;
//! `deferred` holds root-fetched answers until they are split; `mode` says whether a request's route is in entity mode, and with which settings.

pub mod answer;
pub mod batch;
pub mod deferred;
pub mod entry;
pub mod mode;
pub mod prefetch;
pub mod request;
