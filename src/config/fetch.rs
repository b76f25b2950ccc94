//! Coalescing and the shared fetch: the in-flight records, the fetch's timeout, how long and how
//! many requests may wait on another's fetch, and the cluster it goes to.

use super::bounds::{bounded, to_u32, to_usize};
use super::error::{field_error, ConfigError};
use super::raw::RawConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fetch {
    pub(super) flight_slots: u32,
    pub(super) fetch_timeout_ms: u64,
    pub(super) max_wait_ms: u64,
    pub(super) max_waiters: usize,
    pub(super) upstream_cluster: Option<String>,
}

/// `flight_slots`, `fetch_timeout_ms`, `max_wait_ms`, `max_waiters` and `upstream_cluster`, in
/// that order (`d`: their defaults).
pub(super) fn fetch(raw: &RawConfig, d: &Fetch) -> Result<Fetch, ConfigError> {
    let flight_slots = bounded(
        "flight_slots",
        raw.flight_slots,
        u64::from(d.flight_slots),
        1,
        65_536,
    )?;
    let fetch_timeout_ms = bounded(
        "fetch_timeout_ms",
        raw.fetch_timeout_ms,
        d.fetch_timeout_ms,
        1,
        600_000,
    )?;
    let max_wait_ms = bounded("max_wait_ms", raw.max_wait_ms, d.max_wait_ms, 1, 600_000)?;
    let max_waiters = bounded(
        "max_waiters",
        raw.max_waiters,
        d.max_waiters as u64,
        1,
        100_000,
    )?;
    let upstream_cluster = match raw.upstream_cluster.clone() {
        Some(c) if c.trim().is_empty() => {
            return Err(field_error(
                "upstream_cluster",
                "must not be empty (omit it to use the route's cluster)",
            ))
        }
        other => other,
    };
    Ok(Fetch {
        flight_slots: to_u32(flight_slots),
        fetch_timeout_ms,
        max_wait_ms,
        max_waiters: to_usize(max_waiters),
        upstream_cluster,
    })
}
