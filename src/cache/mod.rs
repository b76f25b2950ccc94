//! The cache: what may be stored (`storable`, `headers`, `not_stored`) and for how long
//! (`freshness`), the stored record (`entry`), the table in shared data (`table`: set-associative,
//! bounded in bytes, admitting by frequency; its sets' records in `set_index`, the frequencies in
//! `sketch`), each worker's copies of hot entries (`hot`), what an entry from another Envoy must
//! be to be used (`peer`), whether a client's validators say its copy is current
//! (`conditional`), what a request was answered with (`status`: the `x-cache` vocabulary), what
//! became of each key's last answer (`fates`, for the exact reason of its next miss) and what
//! more memory would have bought (`ghosts`).

pub mod conditional;
pub mod entry;
pub mod fates;
pub mod freshness;
pub mod ghosts;
pub mod headers;
pub mod hot;
pub mod not_stored;
pub mod peer;
pub mod set_index;
pub mod sketch;
pub mod status;
pub mod storable;
pub mod table;
