//! `operation_stats`: counters per GraphQL operation name, exported as Envoy stats with the name
//! as a tag. Cardinality is bounded by `top_k` names (every other name is counted as `other`);
//! a name gets its own series once one worker has seen it `min_requests` times, so that names
//! sent once (a client's typo, a scan) never take a place.

use super::bounds::bounded;
use super::error::ConfigError;
use super::raw::RawOperationStats;

pub const DEFAULT_TOP_K: u64 = 50;
pub const DEFAULT_MIN_REQUESTS: u64 = 2;
/// Each name costs up to a few dozen stats in Envoy (one per counter and reason).
const MAX_TOP_K: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationStats {
    /// Operation names with their own series; 0: per-operation counters off.
    pub top_k: usize,
    /// Requests one worker must see of a name before it takes one of the `top_k` places.
    pub min_requests: u32,
}

impl Default for OperationStats {
    fn default() -> Self {
        OperationStats {
            top_k: DEFAULT_TOP_K as usize,
            min_requests: DEFAULT_MIN_REQUESTS as u32,
        }
    }
}

impl OperationStats {
    pub fn on(&self) -> bool {
        self.top_k > 0
    }
}

pub(super) fn parse(raw: Option<&RawOperationStats>) -> Result<OperationStats, ConfigError> {
    let Some(raw) = raw else {
        return Ok(OperationStats::default());
    };
    let top_k = bounded(
        "operation_stats.top_k",
        raw.top_k,
        DEFAULT_TOP_K,
        0,
        MAX_TOP_K,
    )?;
    let min_requests = bounded(
        "operation_stats.min_requests",
        raw.min_requests,
        DEFAULT_MIN_REQUESTS,
        1,
        1_000_000,
    )?;
    Ok(OperationStats {
        top_k: top_k as usize,
        min_requests: min_requests as u32,
    })
}
