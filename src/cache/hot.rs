//! A small per-worker copy of recently served entries, in front of shared data.
//!
//! Every shared-data read takes Envoy's one process-wide mutex and copies the entry; hot entries
//! are read thousands of times a second by every worker. Entries are immutable and carry their own
//! expiry, so a local copy is exactly as fresh as the shared one: it is served until the same
//! instant, and a shared entry evicted meanwhile only means the copy outlives it, still correct.
//! A purge is the one thing that can end a copy early: each copy remembers the purge epoch it was
//! last checked at, and is checked again when the epoch has moved.

use crate::fast_hash::FastMap;
use crate::request::key::CacheKey;
use std::collections::VecDeque;
use std::rc::Rc;

#[derive(Debug)]
pub struct HotCache {
    max_bytes: usize,
    bytes: usize,
    /// Entry bytes, expiry, and the purge epoch the copy was last checked at.
    map: FastMap<CacheKey, (Rc<[u8]>, u64, u64)>,
    order: VecDeque<CacheKey>,
}

impl HotCache {
    /// Holds at most `max_bytes` of entries (0 turns it off).
    pub fn new(max_bytes: usize) -> Self {
        HotCache {
            max_bytes,
            bytes: 0,
            map: FastMap::default(),
            order: VecDeque::new(),
        }
    }

    /// The entry for `key` if it is still fresh at `now_ms`, with the purge epoch it was last
    /// checked at.
    pub fn get(&mut self, key: &CacheKey, now_ms: u64) -> Option<(Rc<[u8]>, u64)> {
        match self.map.get(key) {
            Some((bytes, expires, epoch)) if *expires > now_ms => Some((Rc::clone(bytes), *epoch)),
            Some(_) => {
                self.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn insert(&mut self, key: CacheKey, bytes: Rc<[u8]>, expires_ms: u64, epoch: u64) {
        if bytes.len() > self.max_bytes / 4 {
            return;
        }
        self.remove(&key);
        self.bytes += bytes.len();
        self.map.insert(key, (bytes, expires_ms, epoch));
        self.order.push_back(key);
        while self.bytes > self.max_bytes {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((bytes, _, _)) = self.map.remove(&old) {
                self.bytes -= bytes.len();
            }
        }
    }

    /// The copy of `key` was checked against the marks of `epoch` and is still fresh.
    pub fn checked(&mut self, key: &CacheKey, epoch: u64) {
        if let Some(entry) = self.map.get_mut(key) {
            entry.2 = epoch;
        }
    }

    /// O(entries), but only on expiry, purge or replacement, never on a hit.
    pub fn remove(&mut self, key: &CacheKey) {
        if let Some((bytes, _, _)) = self.map.remove(key) {
            self.bytes -= bytes.len();
            self.order.retain(|k| k != key);
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CacheKey {
        CacheKey { digest: [n; 32] }
    }

    fn entry(len: usize) -> Rc<[u8]> {
        vec![7u8; len].into()
    }

    #[test]
    fn serves_until_the_entry_expires() {
        let mut h = HotCache::new(1000);
        h.insert(key(1), entry(10), 100, 0);
        assert!(h.get(&key(1), 99).is_some());
        assert!(h.get(&key(1), 100).is_none());
        assert_eq!(h.bytes(), 0, "expired entries are dropped");
    }

    #[test]
    fn is_bounded_in_bytes() {
        let mut h = HotCache::new(1000);
        for n in 0..50 {
            h.insert(key(n), entry(200), 1_000, 0);
            assert!(h.bytes() <= 1000);
        }
        assert!(h.get(&key(49), 0).is_some());
        assert!(h.get(&key(0), 0).is_none());
        // Re-inserting a key does not count it twice, nor grow the eviction order.
        for _ in 0..100 {
            h.insert(key(49), entry(200), 2_000, 0);
        }
        assert!(h.bytes() <= 1000);
        assert_eq!(h.order.len(), h.map.len());
    }

    #[test]
    fn copies_remember_the_epoch_they_were_checked_at() {
        let mut h = HotCache::new(1000);
        h.insert(key(1), entry(10), 100, 3);
        assert_eq!(h.get(&key(1), 0).map(|(_, e)| e), Some(3));
        h.checked(&key(1), 4);
        assert_eq!(h.get(&key(1), 0).map(|(_, e)| e), Some(4));
        h.remove(&key(1));
        assert!(h.get(&key(1), 0).is_none());
        assert_eq!(h.bytes(), 0);
    }

    #[test]
    fn large_entries_and_zero_size_are_not_kept() {
        let mut h = HotCache::new(1000);
        h.insert(key(1), entry(300), 100, 0);
        assert!(h.get(&key(1), 0).is_none());
        let mut off = HotCache::new(0);
        off.insert(key(1), entry(1), 100, 0);
        assert!(off.get(&key(1), 0).is_none());
    }
}
