//! What runs in a request's own callbacks (its HTTP context): everything here may pause, serve or
//! let go only the request it belongs to; work for other requests is queued for the root.

pub mod capture;
pub mod entities;
pub mod entity_join;
pub mod entity_stale;
pub mod exchange;
pub mod explain;
pub mod join;
pub mod log_record;
pub mod lookup;
pub mod mutation_purge;
pub mod prefetch;
pub mod purge;
pub mod read;
pub mod shadow;
