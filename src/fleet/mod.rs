//! The fleet: many Envoys sharing one cache through the L2 service (`graphql-cache-l2`, in front
//! of Redis), reached by HTTP callouts because the wasm ABI has no Redis calls.
//!
//! `wire` is the service's verbs as callouts and their answers read strictly; `purge_log` is what
//! one node's purge looks like to the others; `calls` is what a worker has outstanding with the
//! service. The decisions (when to ask, what a hit may answer) are in `worker::l2::ask`,
//! `worker::l2::write` and `worker::l2::feed`.

pub mod calls;
pub mod commits;
pub mod follower;
pub mod outbox;
pub mod purge_log;
pub mod seal;
pub mod wire;
