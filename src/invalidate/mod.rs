//! Keeping answers fresh before their TTL: what an entry is about (`tags`), purge marks in
//! bounded shared memory (`marks`), the purge API's request (`purge_request`), and what a
//! mutation's answer purges (`mutation`, read through its operation's `shape` so that a client's
//! aliases cannot steer it). The worker applies them: `worker::request::purge` answers the API
//! and purges after mutations; lookups ask the marks.

pub mod cdn;
pub mod marks;
pub mod mutation;
pub mod purge_request;
pub mod shape;
pub mod tags;
