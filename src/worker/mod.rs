//! One worker's decisions, written against `crate::effects` so they run natively in tests.
//!
//! In wings by feature, each owning its part of the worker and exposing verbs; imports go one
//! way, down this list (a wing uses those below it and the top, never one above):
//! - `root`: the root context's callbacks, each routed to its wing: `callouts` (a callout came
//!   back), `queue` (the wake-up queue), `dispatch` (sending what requests queued), `tick` (the
//!   timer's periodic work), `configure`. It hands the entities wing to the flights wing.
//! - `exchange`: one request's way through the filter (an HTTP context's callbacks), routed by
//!   kind to its machine: `hit` (a keyed query), `entity` (`_entities` in entity mode), `admin`
//!   (purge, explain), `mutation`, `shadowing`; then `response` and `report`.
//! - `admin`: the operator's routes behind the purge token (`purge`, `explain`) and mutation
//!   purges.
//! - `entities`: entity mode on the subgraph hop: batches looked up entity by entity, partial
//!   fetches, single-entity flights, prefetches, splitting answers into entries; plugged into
//!   the flights wing through `flights::kinds` (`entities::plug`).
//! - `flights`: one shared fetch per key across the workers: `Flights` (who waits, what is
//!   queued and sent, how each paused request was let go), `join`, the lead `permit`, the
//!   leader's `shared_fetch`, `followers`, `answer` (letting paused requests go), `wake`.
//! - `fleet`: the L2 shared by the Envoys: `ask`, `write`, `feed` (other Envoys' purges), `vet`.
//! - `serving`: the L1 over shared data: `lookup` and serve, `marks` (purges, asked before any
//!   entry is handed out), `stale`, `store`, `capture`, `shadow`, `labels` (the `x-cache`
//!   headers).
//! - at the top, what every wing uses: `ctx` (the context a function runs with, lent so that no
//!   borrow of the worker is held across a host call; its host is a `RootHost` only in the
//!   root's callbacks), `state` (the plugin, and the worker composed of the wings' state),
//!   `read` (a request's head), `callout` (a callout's answer), `to_root` (asking the root to
//!   send), `timer` (asking it to tick soon), `watchdog` (the body-hold guard) and
//!   `operation_counts`.
//! - `tests` plays whole requests through fake hosts.

pub mod admin;
pub mod callout;
pub mod ctx;
pub mod entities;
pub mod exchange;
pub mod fleet;
pub mod flights;
pub mod operation_counts;
pub mod read;
pub mod root;
pub mod serving;
pub mod state;
pub mod timer;
pub mod to_root;
pub mod watchdog;

#[cfg(test)]
mod tests;
