//! How much memory the filter may hold, in shared data and in each worker: cache slots and entry
//! size (whose product has a ceiling of its own), the key memo, the local cache and the APQ slots.

use super::bounds::{bounded, to_u32, to_usize, MAX_ENTRY_BYTES, MAX_SLOTS, MAX_TOTAL_CACHE_BYTES};
use super::error::{field_error, ConfigError};

/// `cache_slots` and `max_entry_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cache {
    pub(super) slots: u32,
    pub(super) max_entry_bytes: usize,
}

pub(super) fn cache(
    cache_slots: Option<u64>,
    max_entry_bytes: Option<u64>,
    d: Cache,
) -> Result<Cache, ConfigError> {
    let cache_slots = bounded("cache_slots", cache_slots, d.slots as u64, 1, MAX_SLOTS)?;
    let max_entry_bytes = bounded(
        "max_entry_bytes",
        max_entry_bytes,
        d.max_entry_bytes as u64,
        1024,
        MAX_ENTRY_BYTES,
    )?;
    if cache_slots.saturating_mul(max_entry_bytes) > MAX_TOTAL_CACHE_BYTES {
        return Err(field_error(
            "cache_slots",
            format!(
                "cache_slots x max_entry_bytes = {} bytes exceeds the {} byte ceiling",
                cache_slots.saturating_mul(max_entry_bytes),
                MAX_TOTAL_CACHE_BYTES
            ),
        ));
    }
    Ok(Cache {
        slots: to_u32(cache_slots),
        max_entry_bytes: to_usize(max_entry_bytes),
    })
}

/// `key_memo_entries` and `local_cache_bytes`: each worker's own memory (0 turns either off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PerWorker {
    pub(super) key_memo_entries: usize,
    pub(super) local_cache_bytes: usize,
}

pub(super) fn per_worker(
    key_memo_entries: Option<u64>,
    local_cache_bytes: Option<u64>,
    d: PerWorker,
) -> Result<PerWorker, ConfigError> {
    let key_memo_entries = bounded(
        "key_memo_entries",
        key_memo_entries,
        d.key_memo_entries as u64,
        0,
        65_536,
    )?;
    let local_cache_bytes = bounded(
        "local_cache_bytes",
        local_cache_bytes,
        d.local_cache_bytes as u64,
        0,
        256 << 20,
    )?;
    Ok(PerWorker {
        key_memo_entries: to_usize(key_memo_entries),
        local_cache_bytes: to_usize(local_cache_bytes),
    })
}

/// `apq_slots` (0 turns persisted queries off).
pub(super) fn apq_slots(raw: Option<u64>, default: u32) -> Result<u32, ConfigError> {
    bounded("apq_slots", raw, u64::from(default), 0, 65_536).map(to_u32)
}
