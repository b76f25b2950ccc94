//! Coalescing: one upstream fetch per key at a time, across every Envoy worker.
//!
//! Two levels, because waking a paused request is only possible from the worker that owns it:
//! `flights` in shared data elect one leader per key across workers; `waiters` hold each worker's
//! paused requests. The leader's root context sends `upstream`'s request, the answer is `relay`ed
//! to whoever `sharing` allows, and other workers hear of it through `wakeup` messages.

pub mod flights;
pub mod liveness;
pub mod relay;
pub mod release;
pub mod sharing;
pub mod upstream;
pub mod waiters;
pub mod wakeup;
