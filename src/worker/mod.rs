//! One worker's decisions, written against `crate::effects` so they run natively in tests.
//!
//! Grouped by the context that runs the code, because Envoy's contexts differ in what they may do
//! (a request's callout dies with the request; only the root may answer a paused request):
//! - `request`: a request's own callbacks. `exchange` (one per request: `read` the head, classify,
//!   `lookup` and serve a hit, `join` the shared fetch for a miss, `capture` a plain miss),
//!   `shadow` (shadow mode) and `purge` (the purge API and mutation purges; `marks::mark` applies
//!   every purge, the fleet's log's too).
//! - `root`: the root context's work. `dispatch` sends what requests queued, `callouts` routes
//!   what comes back, `shared_fetch` (the leader's fetch; `stale` serves stale instead of an
//!   error), `followers` (other workers' wake-ups), `answer` lets paused requests go, `tick` is
//!   the fallback timer, `configure` loads a configuration.
//! - `l2`: the fleet L2, run from the root: `ask` (a leader asks L2 before the origin, and says
//!   what the root does next), `write` (stores, releases, purge records) and `feed` (other
//!   Envoys' purges, applied here).
//! - at the top, what every side uses: `state` (the worker's two kinds of state), `ctx` (the
//!   context every function runs with: the plugin, the worker and the host, lent so that no borrow
//!   of the worker is held across a host call), `marks` (the purge marks as this worker sees them,
//!   asked before any stored entry is handed out), `store` (storing an upstream answer, for the
//!   shared fetch and a plain miss), `callout` (a callout's answer, as the root reads it) and
//!   `watchdog` (the body-hold guard: a request holds, the root's timer lets go).
//! - `tests` plays whole requests through fake hosts.
//!
//! Imports go one way: `request` may use `root` (to queue work for it) and `l2`, `root` may use
//! `l2`, `l2` uses only the top, and the top uses no side.

pub mod callout;
pub mod ctx;
pub mod entity_store;
pub mod flights;
pub mod l2;
pub mod marks;
pub mod operation_counts;
pub mod request;
pub mod root;
pub mod state;
pub mod store;
pub mod watchdog;

#[cfg(test)]
mod tests;
