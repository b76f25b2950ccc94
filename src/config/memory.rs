//! How much memory the filter may hold, in shared data and in each worker: the cache's byte budget,
//! its entry slots and largest entry, the key memo, the local cache and the APQ slots.

use super::bounds::{bounded, to_u32, to_usize, MAX_ENTRY_BYTES, MAX_SLOTS, MAX_TOTAL_CACHE_BYTES};
use super::error::{field_error, ConfigError};
use super::raw::RawConfig;

/// `cache_bytes`, `cache_slots` and `max_entry_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cache {
    pub(super) bytes: u64,
    pub(super) slots: u32,
    pub(super) max_entry_bytes: usize,
}

/// The smallest byte budget: a few entries of the smallest `max_entry_bytes`.
const MIN_CACHE_BYTES: u64 = 64 << 10;
/// Without `cache_slots`, one entry slot per this many bytes of budget: answers of this size or
/// larger fill the budget before the slots run out, and answers of 1 KiB leave each set of ways
/// room to spare, so keys that share a set do not push each other out while the budget holds
/// colder ones (at one slot per KiB, a working set of 0.75x the budget lost 0.3 points to full
/// sets). Each slot is a shared-data key Envoy never frees (about 100 bytes once used) and 16
/// bytes in each worker, so more would waste memory.
pub(super) const BYTES_PER_SLOT: u64 = 512;
/// The same for a listener in entity mode (`entities`): its entries are single objects (a
/// product's fields, a user's name), mostly 100 to 400 bytes, and at one slot per 512 bytes the
/// slots ran out with half the budget unused (`make bench-entities`: 4 MiB held 8192 entities of
/// about 250 bytes; one slot per 256 bytes cut the representations the subgraphs resolved by a
/// fifth, and one per 128 bytes gained nothing more).
pub(super) const ENTITY_BYTES_PER_SLOT: u64 = 256;
/// Fewest slots a derived `cache_slots` gets (one full set of ways).
const MIN_DERIVED_SLOTS: u64 = 16;

pub(super) fn cache(raw: &RawConfig, d: Cache) -> Result<Cache, ConfigError> {
    let bytes = bounded(
        "cache_bytes",
        raw.cache_bytes,
        d.bytes,
        MIN_CACHE_BYTES,
        MAX_TOTAL_CACHE_BYTES,
    )?;
    let per_slot = match raw.entities {
        Some(_) => ENTITY_BYTES_PER_SLOT,
        None => BYTES_PER_SLOT,
    };
    let derived = (bytes / per_slot).clamp(MIN_DERIVED_SLOTS, MAX_SLOTS);
    let slots = bounded("cache_slots", raw.cache_slots, derived, 1, MAX_SLOTS)?;
    let max_entry_bytes = bounded(
        "max_entry_bytes",
        raw.max_entry_bytes,
        d.max_entry_bytes as u64,
        1024,
        MAX_ENTRY_BYTES,
    )?;
    if max_entry_bytes > bytes {
        return Err(field_error(
            "max_entry_bytes",
            format!("{max_entry_bytes} is larger than cache_bytes ({bytes}): nothing that large could be stored"),
        ));
    }
    Ok(Cache {
        bytes,
        slots: to_u32(slots),
        max_entry_bytes: to_usize(max_entry_bytes),
    })
}

/// Without `local_cache_bytes`, each worker's copies get this share of `cache_bytes`, up to
/// `LOCAL_CEILING`: a copy duplicates an entry the shared table holds too, so it is there for
/// speed (the hottest entries without a shared-data read), and bytes spent on it are bytes the
/// table cannot hold. A 64th cost two workers 3 points of hit ratio on a loop slightly larger
/// than the cache (`make bench-hitratio`); a 1024th still holds the few dozen hottest answers.
const LOCAL_SHARE: u64 = 1024;
const LOCAL_CEILING: u64 = 4 << 20;

/// The default `local_cache_bytes` for a cache of `cache_bytes`.
pub(super) fn local_default(cache_bytes: u64) -> usize {
    to_usize((cache_bytes / LOCAL_SHARE).min(LOCAL_CEILING))
}

/// `key_memo_entries` and `local_cache_bytes`: each worker's own memory (0 turns either off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PerWorker {
    pub(super) key_memo_entries: usize,
    pub(super) local_cache_bytes: usize,
}

pub(super) fn per_worker(raw: &RawConfig, d: PerWorker) -> Result<PerWorker, ConfigError> {
    let key_memo_entries = bounded(
        "key_memo_entries",
        raw.key_memo_entries,
        d.key_memo_entries as u64,
        0,
        65_536,
    )?;
    let local_cache_bytes = bounded(
        "local_cache_bytes",
        raw.local_cache_bytes,
        d.local_cache_bytes as u64,
        0,
        256 << 20,
    )?;
    Ok(PerWorker {
        key_memo_entries: to_usize(key_memo_entries),
        local_cache_bytes: to_usize(local_cache_bytes),
    })
}

/// What the filter keeps to explain its hit ratio: `miss_reason_keys` (0 turns exact miss
/// reasons off: see `cache::fates`) and `what_if_records` (0 turns the what-if route's
/// recording off: see `whatif::ring`).
pub(super) fn insight(raw: &RawConfig, defaults: (u32, u32)) -> Result<(u32, u32), ConfigError> {
    let fates = bounded(
        "miss_reason_keys",
        raw.miss_reason_keys,
        u64::from(defaults.0),
        0,
        1 << 20,
    )?;
    let records = bounded(
        "what_if_records",
        raw.what_if_records,
        u64::from(defaults.1),
        0,
        1 << 16,
    )?;
    Ok((to_u32(fates), to_u32(records)))
}

/// `apq_slots` (0 turns persisted queries off).
pub(super) fn apq_slots(raw: Option<u64>, default: u32) -> Result<u32, ConfigError> {
    bounded("apq_slots", raw, u64::from(default), 0, 65_536).map(to_u32)
}
