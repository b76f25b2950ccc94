//! One worker's decisions, written against `crate::effects` so they run natively in tests.
//!
//! A request's way: `exchange` (one per request: `read` the head, classify, `lookup` and serve a
//! hit, `join` the shared fetch for a miss, `capture` a plain miss), then for shared fetches
//! `shared_fetch` (the leader's root dispatches and finishes it, `store` keeps the answer) and
//! `followers` (other workers' wake-ups); `answer` lets paused requests go; `tick` is the
//! fallback timer, `watchdog` the body-hold guard; `configure` loads a configuration; `state`
//! holds the worker's two kinds of state.
//!
//! The root's side: `dispatch` sends what requests queued, `callouts` routes what comes back.
//! With a fleet L2: `l2_lookup` (a leader asks L2 before the origin), `l2_write` (stores,
//! releases, purge records) and `purge_feed` (other Envoys' purges, applied here).

pub mod answer;
pub mod callouts;
pub mod capture;
pub mod configure;
pub mod dispatch;
pub mod exchange;
pub mod followers;
pub mod join;
pub mod l2_lookup;
pub mod l2_write;
pub mod lookup;
pub mod purge;
pub mod purge_feed;
pub mod read;
pub mod shadow;
pub mod shared_fetch;
pub mod stale;
pub mod state;
pub mod store;
pub mod tick;
pub mod watchdog;

#[cfg(test)]
mod fleet_scenarios;
#[cfg(test)]
mod scenarios;
