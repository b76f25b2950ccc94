//! One worker's decisions, written against `crate::effects` so they run natively in tests.
//!
//! A request's way: `exchange` (one per request: `read` the head, classify, `lookup` and serve a
//! hit, `join` the shared fetch for a miss, `capture` a plain miss), then for shared fetches
//! `shared_fetch` (the leader's root dispatches and finishes it, `store` keeps the answer) and
//! `followers` (other workers' wake-ups); `answer` lets paused requests go; `tick` is the
//! fallback timer, `watchdog` the body-hold guard; `configure` loads a configuration; `state`
//! holds the worker's two kinds of state.

pub mod answer;
pub mod capture;
pub mod configure;
pub mod exchange;
pub mod followers;
pub mod join;
pub mod lookup;
pub mod purge;
pub mod read;
pub mod shadow;
pub mod shared_fetch;
pub mod stale;
pub mod state;
pub mod store;
pub mod tick;
pub mod watchdog;

#[cfg(test)]
mod scenarios;
