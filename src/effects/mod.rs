//! Every effect the core has on Envoy, as small traits: shared data, the clock, wake-up queues,
//! callouts, answering or resuming paused requests, the current request's headers and body,
//! properties, counters and the log. `crate::host` implements them over proxy-wasm; `fake`
//! implements them in memory for native tests.

pub mod counters;
pub mod header_block;
pub mod host;
pub mod operation_stats;
pub mod store;

#[cfg(test)]
pub mod fake;
