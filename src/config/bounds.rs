//! Ceilings and range checks shared by every concern: a typo must not turn into an unbounded
//! allocation in Envoy's heap, and an out-of-range number is refused with its range.

use super::error::{field_error, ConfigError};

pub(super) const MAX_SLOTS: u64 = 1 << 22;
pub(super) const MAX_TTL_SECONDS: u64 = 365 * 24 * 3600;
pub(super) const MAX_ENTRY_BYTES: u64 = 64 << 20;
pub(super) const MAX_TOTAL_CACHE_BYTES: u64 = 8 << 30;
pub(super) const MAX_QUERY_FIELDS: u64 = 1_000_000;
pub(super) const MAX_BODY_BYTES: u64 = 64 << 20;
/// graphql-parser refuses to nest deeper than 50 on its own; a higher setting would be a lie.
pub(super) const MAX_QUERY_DEPTH: u64 = 50;

pub(super) fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

pub(super) fn to_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

pub(super) fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(field_error(
            field,
            format!("{v} is out of range {min}..={max}"),
        ));
    }
    Ok(v)
}
