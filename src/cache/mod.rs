//! The cache: what may be stored and for how long (`storable`), the stored record (`entry`), the
//! bounded slot table in shared data (`table`), and each worker's copies of hot entries (`hot`).

pub mod entry;
pub mod hot;
pub mod storable;
pub mod table;
