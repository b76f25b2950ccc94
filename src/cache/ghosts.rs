//! What more memory would buy: the hit ratio this store would have had with 2x and 4x its
//! `cache_bytes`, from ghosts of the entries that left it.
//!
//! A larger store holds what this one holds and, roughly, what left this one most lately: the
//! extra `(m - 1) x cache_bytes` act as a queue of the entries that were evicted or refused by
//! admission, the newest in, the oldest out. So every entry that leaves is stamped with the bytes
//! that had left before it (one running total in shared data), and that stamp is kept as the
//! key's fate (`cache::fates`, a few bytes, bounded by `miss_reason_keys`). When the key misses
//! later, the bytes that left since its stamp say whether the queue of an m-times store would
//! still hold it; and it must still be servable then (its own keep-until), as it would have been
//! in the larger store.
//!
//! This is exact for LRU (its inclusion property) and an estimate for the frequency-aware table,
//! which at more memory also keeps entries it refuses today: replayed against W-TinyLFU at 2x
//! and 4x (bench/hitratio traces) the estimate was within 0.02 on every trace. The ghosts reach
//! as far as the fate pages: a store holding many more entries than `miss_reason_keys` forgets
//! its oldest ghosts first, which under-counts the 4x figure before the 2x one.

use crate::effects::store::{update, SharedStore, StoreError};

/// The bytes of every entry that left the table (evicted, or refused by admission), since the
/// Envoy started: only differences between two readings mean anything.
const LEFT_KEY: &str = "graphql-cache/v2/left-bytes";

/// The smallest store, in multiples of this one's `cache_bytes`, in which a miss would have hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WouldHit {
    /// With twice the memory (and so with four times too).
    At2x,
    /// With four times the memory, not with twice.
    At4x,
}

impl WouldHit {
    /// The multiples a miss counts for, as the counters' reason labels.
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            WouldHit::At2x => &["2x", "4x"],
            WouldHit::At4x => &["4x"],
        }
    }
}

/// The running total of bytes that left the table.
pub fn total(store: &impl SharedStore) -> u64 {
    store
        .get(LEFT_KEY)
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Counts `size` bytes leaving the table; the total before them (the leaver's stamp).
pub fn leave(store: &impl SharedStore, size: u32) -> Result<u64, StoreError> {
    let mut before = 0;
    update(store, LEFT_KEY, |old| {
        before = old
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes);
        Some(before.wrapping_add(u64::from(size)).to_le_bytes().to_vec())
    })?;
    Ok(before)
}

/// Whether an entry stamped `left_at`, servable until `until_s`, would still be held now (the
/// total at `left_now`, `now_s`) by a store of 2x or 4x `budget_bytes`.
pub fn would_hit(
    left_at: u64,
    until_s: u32,
    left_now: u64,
    now_s: u32,
    budget_bytes: u64,
) -> Option<WouldHit> {
    if until_s != 0 && now_s >= until_s {
        return None;
    }
    // The leaver itself and everything that left after it: what the queue holds behind it.
    let behind = left_now.wrapping_sub(left_at);
    match behind {
        b if b <= budget_bytes => Some(WouldHit::At2x),
        b if b <= budget_bytes.saturating_mul(3) => Some(WouldHit::At4x),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn stamps_are_the_bytes_that_left_before() {
        let store = MapStore::default();
        assert_eq!(total(&store), 0);
        assert_eq!(leave(&store, 100).unwrap(), 0);
        assert_eq!(leave(&store, 50).unwrap(), 100);
        assert_eq!(total(&store), 150);
    }

    #[test]
    fn a_leaver_hits_at_the_smallest_multiple_whose_queue_still_holds_it() {
        // Budget 1000: the 2x store's queue holds 1000 bytes of leavers, the 4x one 3000.
        let at = |left_now| would_hit(5_000, 0, left_now, 10, 1_000);
        assert_eq!(at(5_100), Some(WouldHit::At2x), "only itself behind");
        assert_eq!(at(6_000), Some(WouldHit::At2x), "exactly full");
        assert_eq!(at(6_001), Some(WouldHit::At4x));
        assert_eq!(at(8_000), Some(WouldHit::At4x));
        assert_eq!(at(8_001), None, "pushed out of every queue");
    }

    #[test]
    fn an_entry_past_its_serving_time_would_have_missed_anyway() {
        assert_eq!(would_hit(0, 20, 10, 19, 1_000), Some(WouldHit::At2x));
        assert_eq!(would_hit(0, 20, 10, 20, 1_000), None);
    }

    #[test]
    fn a_total_that_wrapped_still_measures_the_bytes_since() {
        assert_eq!(
            would_hit(u64::MAX - 10, 0, 20, 1, 1_000),
            Some(WouldHit::At2x)
        );
    }

    #[test]
    fn the_2x_labels_count_for_4x_too() {
        assert_eq!(WouldHit::At2x.labels(), &["2x", "4x"]);
        assert_eq!(WouldHit::At4x.labels(), &["4x"]);
    }
}
