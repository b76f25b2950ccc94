//! Keeping answers fresh before their TTL: what an entry is about (`tags`), purge marks in
//! bounded shared memory (`marks`), and the purge API's request (`purge`). The worker applies
//! them: `worker::purge` answers the API and purges after mutations; lookups ask the marks.

pub mod marks;
pub mod purge;
pub mod tags;
