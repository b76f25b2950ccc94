//! The serving wing: this worker's L1 over shared data. `lookup` finds a key's entry (the hot
//! copy, the seen-sketch, the table) and serves it, `marks` is the purge marks as this worker sees
//! them (asked before any stored entry is handed out), `stale` finds entries still servable
//! when the origin fails, `store` stores an upstream answer, `capture` collects a plain miss's
//! answer for it, `labels` are the headers an answer from the cache carries, `shadow` runs
//! shadow mode's comparison, and `recent` keeps the recent traffic the what-if route replays.

pub mod capture;
pub mod labels;
pub mod lookup;
pub mod marks;
pub mod recent;
pub mod shadow;
pub mod stale;
pub mod store;
