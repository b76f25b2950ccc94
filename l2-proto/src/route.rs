//! The service's routes and their query parameters, and the paths the filter sends: the service
//! routes and parses with the same names the filter builds with.

use crate::limits::{MAX_LEASE_MS, MAX_TTL_MS, MIN_LEASE_MS, MIN_TTL_MS};

/// `POST`: the value of a key, or its lease.
pub const LOOKUP: &str = "/v1/lookup";
/// `PUT`: stores a value (the body) and releases the owner's lease.
pub const STORE: &str = "/v1/store";
/// `POST`: the values of several keys (entity mode; body and answer: [`crate::batch`]).
pub const MGET: &str = "/v1/mget";
/// `PUT`: stores several values (entity mode; body: [`crate::batch`]). No lease is involved.
pub const MSTORE: &str = "/v1/mstore";
/// `POST`: gives a lease up.
pub const RELEASE: &str = "/v1/release";
/// `POST`: appends a purge record (the body) to the purge log.
pub const PURGE: &str = "/v1/purge";
/// `GET`: reads the purge log.
pub const PURGES: &str = "/v1/purges";
/// `POST`: appends a batch of purge marks to the log and the snapshot; `GET`: reads the
/// snapshot a page at a time ([`crate::marks`]).
pub const MARKS: &str = "/v1/marks";
/// `GET`, without authentication: whether any Redis node answers.
pub const HEALTH: &str = "/health";
/// `GET`: Prometheus metrics.
pub const METRICS: &str = "/metrics";

/// Query parameter names.
pub mod param {
    /// A key's name in the L2 ([`crate::limits::valid_key`]).
    pub const KEY: &str = "key";
    /// Who leads ([`crate::limits::valid_owner`]).
    pub const OWNER: &str = "owner";
    pub const LEASE_MS: &str = "lease_ms";
    pub const TTL_MS: &str = "ttl_ms";
    /// How long a lookup or a purge log read may wait (0, or absent: not at all).
    pub const WAIT_MS: &str = "wait_ms";
    /// The purge log cursor ([`crate::limits::valid_cursor`]).
    pub const AFTER: &str = "after";
    /// The purge log generation the reader knows ([`crate::limits::valid_generation`]).
    pub const GEN: &str = "gen";
    /// The sequence number of the last log entry the reader applied.
    pub const N: &str = "n";
    /// Where a snapshot read goes on ([`crate::marks::valid_scan_cursor`]; `0`: from the start).
    pub const CURSOR: &str = "cursor";
}

use param::{AFTER, CURSOR, GEN, KEY, LEASE_MS, N, OWNER, TTL_MS, WAIT_MS};

/// `POST /v1/lookup` of `key` (hex), taking its lease for `lease_ms` (clamped into what the service
/// grants); `wait_ms > 0` long-polls. `key` and `owner` go in as they are: hex, and an owner
/// without reserved characters.
pub fn lookup(key: &str, lease_ms: u64, owner: &str, wait_ms: u64) -> String {
    let lease_ms = lease_ms.clamp(MIN_LEASE_MS, MAX_LEASE_MS);
    let mut path = format!("{LOOKUP}?{KEY}={key}&{LEASE_MS}={lease_ms}&{OWNER}={owner}");
    if wait_ms > 0 {
        path.push_str(&format!("&{WAIT_MS}={wait_ms}"));
    }
    path
}

/// `PUT /v1/store` of `key` for `ttl_ms` (clamped into what the service takes).
pub fn store(key: &str, ttl_ms: u64, owner: &str) -> String {
    let ttl_ms = ttl_ms.clamp(MIN_TTL_MS, MAX_TTL_MS);
    format!("{STORE}?{KEY}={key}&{TTL_MS}={ttl_ms}&{OWNER}={owner}")
}

/// `POST /v1/release` of `owner`'s lease on `key`.
pub fn release(key: &str, owner: &str) -> String {
    format!("{RELEASE}?{KEY}={key}&{OWNER}={owner}")
}

/// `GET /v1/purges` after `cursor` of log `generation` (once known), waiting up to `wait_ms`.
/// Both come from an earlier answer, checked by [`crate::purges::PurgesAnswer::decode`].
/// With `n` (the sequence number of the last entry applied), the service answers a gap for any
/// entry missing after it, trimmed or deleted.
pub fn purges(cursor: &str, generation: Option<&str>, n: Option<u64>, wait_ms: u64) -> String {
    let mut path = format!("{PURGES}?{AFTER}={cursor}&{WAIT_MS}={wait_ms}");
    if let Some(g) = generation {
        path.push_str(&format!("&{GEN}={g}"));
    }
    if let Some(n) = n {
        path.push_str(&format!("&{N}={n}"));
    }
    path
}

/// `GET /v1/marks` from `cursor` (`"0"`: the first page), a cursor an earlier page gave.
pub fn marks(cursor: &str) -> String {
    format!("{MARKS}?{CURSOR}={cursor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_what_the_service_parses() {
        let k = "ab".repeat(32);
        assert_eq!(
            lookup(&k, 12_000, "00000000000000ff", 0),
            format!("/v1/lookup?key={k}&lease_ms=12000&owner=00000000000000ff")
        );
        assert_eq!(
            lookup(&k, 0, "o", 1500),
            format!("/v1/lookup?key={k}&lease_ms=1&owner=o&wait_ms=1500")
        );
        assert!(lookup(&k, u64::MAX, "o", 0).contains("&lease_ms=86400000&"));
        assert_eq!(
            store(&k, 0, "o"),
            format!("/v1/store?key={k}&ttl_ms=1&owner=o")
        );
        assert!(store(&k, u64::MAX, "o").contains("&ttl_ms=31536000000&"));
        assert_eq!(release(&k, "o"), format!("/v1/release?key={k}&owner=o"));
        assert_eq!(
            purges("7-0", None, None, 1000),
            "/v1/purges?after=7-0&wait_ms=1000"
        );
        assert_eq!(
            purges("0", Some("g1"), Some(12), 0),
            "/v1/purges?after=0&wait_ms=0&gen=g1&n=12"
        );
        assert_eq!(marks("0"), "/v1/marks?cursor=0");
    }
}
