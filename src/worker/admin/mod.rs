//! The admin wing: the routes an operator calls, behind the purge token. `purge` is the purge
//! API (and applies every purge, the fleet's log's too, through `serving::marks`),
//! `mutation_purge` purges what a mutation changed, `explain` says what the cache would do
//! with a request, and `what_if` what another configuration would have done with the recent
//! traffic.

pub mod explain;
pub mod mutation_purge;
pub mod purge;
pub mod what_if;
