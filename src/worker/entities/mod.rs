//! The entities wing: entity mode's `_entities` batches on the subgraph hop. `batch` looks a
//! batch up entry by entity, answers it whole from entries, or fetches only what it misses
//! (`partial`) and captures a forwarded answer (`streamed`); `join` has a batch none of whose
//! entities is cached wait on a shared fetch; `stale` refreshes stale entities in the
//! background; `flights` claims single entities' flights for the root's fetches (`fetch`),
//! which `prefetch` starts for what an answer named (`trigger` says which routes may); `store`
//! splits an answer into entries; `l2` asks the fleet's L2 for what L1 lacks;
//! `plug` is the wing as the flights wing sees it (`flights::kinds`).

pub mod batch;
pub mod fetch;
pub mod flights;
pub mod join;
pub mod l2;
pub mod plug;
pub mod prefetch;
pub mod stale;
pub mod store;
pub mod trigger;
