//! The bounded cache table in Envoy's shared data.
//!
//! Envoy never frees a shared-data key, so the set of keys must be fixed: `cache_slots` slots,
//! addressed by the key's hash. Each slot holds the full digest of the key it belongs to, so a
//! collision is a miss (and an overwrite on store), never a wrong answer.

use crate::cache::entry::{DecodeError, Entry};
use crate::effects::store::{SharedStore, StoreError};
use crate::request::key::{CacheKey, SlotKey};

#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A fresh entry for exactly this key; decode it with [`Entry::decode`].
    Hit(Vec<u8>),
    /// Expired, but within its stale-while-revalidate or stale-if-error window.
    Stale(Vec<u8>),
    Miss(MissKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissKind {
    Empty,
    Expired,
    /// The slot holds another key's entry.
    Collision,
    /// The slot holds a record of another format version (or garbage).
    Foreign,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// A fresh entry of another key was displaced.
    pub evicted: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct SlotTable {
    slots: u32,
    secret: SlotKey,
}

const SLOT_PREFIX: &str = "graphql-cache/v1/slot/";

impl SlotTable {
    pub fn new(slots: u32, secret: SlotKey) -> Self {
        SlotTable {
            slots: slots.max(1),
            secret,
        }
    }

    pub fn slot_name(&self, key: &CacheKey) -> String {
        format!("{SLOT_PREFIX}{}", key.slot(self.slots, &self.secret))
    }

    pub fn lookup(&self, store: &impl SharedStore, key: &CacheKey, now_ms: u64) -> Lookup {
        let Some(bytes) = store.get(&self.slot_name(key)) else {
            return Lookup::Miss(MissKind::Empty);
        };
        match Entry::peek(&bytes) {
            Err(DecodeError::Empty) => Lookup::Miss(MissKind::Empty),
            Err(_) => Lookup::Miss(MissKind::Foreign),
            Ok(p) if p.digest != key.digest => Lookup::Miss(MissKind::Collision),
            Ok(p) if p.expires_at_ms > now_ms => Lookup::Hit(bytes),
            Ok(p) if p.keep_until_ms > now_ms => Lookup::Stale(bytes),
            Ok(_) => Lookup::Miss(MissKind::Expired),
        }
    }

    /// Writes an encoded entry into the key's slot, replacing whatever was there.
    pub fn insert(
        &self,
        store: &impl SharedStore,
        key: &CacheKey,
        encoded: &[u8],
        now_ms: u64,
    ) -> Result<Stored, StoreError> {
        let name = self.slot_name(key);
        let evicted = match store.get(&name) {
            Some(old) => matches!(
                Entry::peek(&old),
                Ok(p) if p.digest != key.digest && p.expires_at_ms > now_ms
            ),
            None => false,
        };
        store.set(&name, encoded)?;
        Ok(Stored { evicted })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    fn key(n: u8) -> CacheKey {
        CacheKey { digest: [n; 32] }
    }

    fn entry(k: &CacheKey, expires: u64) -> Vec<u8> {
        Entry {
            digest: k.digest,
            stored_at_ms: 0,
            expires_at_ms: expires,
            stale_ms: 50,
            error_ms: 0,
            upstream_age_s: 0,
            born_us: 0,
            status: 200,
            headers: vec![("content-type", "application/json")],
            tag_hashes: vec![],
            tags: "",
            body: b"{}",
        }
        .encode()
    }

    #[test]
    fn store_then_hit_then_expire() {
        let store = MapStore::default();
        let t = SlotTable::new(8, SlotKey::default());
        let k = key(1);
        assert_eq!(t.lookup(&store, &k, 0), Lookup::Miss(MissKind::Empty));
        t.insert(&store, &k, &entry(&k, 100), 0).unwrap();
        assert!(matches!(t.lookup(&store, &k, 99), Lookup::Hit(_)));
        assert!(
            matches!(t.lookup(&store, &k, 100), Lookup::Stale(_)),
            "in its window"
        );
        assert_eq!(t.lookup(&store, &k, 150), Lookup::Miss(MissKind::Expired));
    }

    #[test]
    fn a_collision_is_a_miss_and_an_eviction() {
        let store = MapStore::default();
        let t = SlotTable::new(1, SlotKey::default());
        let (a, b) = (key(1), key(2));
        assert_eq!(
            t.insert(&store, &a, &entry(&a, 100), 0),
            Ok(Stored { evicted: false })
        );
        assert_eq!(t.lookup(&store, &b, 0), Lookup::Miss(MissKind::Collision));
        assert_eq!(
            t.insert(&store, &b, &entry(&b, 100), 0),
            Ok(Stored { evicted: true })
        );
        assert_eq!(t.lookup(&store, &a, 0), Lookup::Miss(MissKind::Collision));
        // Replacing an expired entry is not an eviction.
        assert_eq!(
            t.insert(&store, &a, &entry(&a, 100), 200),
            Ok(Stored { evicted: false })
        );
    }

    #[test]
    fn foreign_and_emptied_slots_are_misses() {
        let store = MapStore::default();
        let t = SlotTable::new(4, SlotKey::default());
        let k = key(3);
        let name = t.slot_name(&k);
        store.set(&name, b"old format").unwrap();
        assert_eq!(t.lookup(&store, &k, 0), Lookup::Miss(MissKind::Foreign));
        store.set(&name, b"").unwrap();
        assert_eq!(t.lookup(&store, &k, 0), Lookup::Miss(MissKind::Empty));
    }

    #[test]
    fn the_number_of_keys_is_bounded_by_the_slot_count() {
        let store = MapStore::default();
        let t = SlotTable::new(16, SlotKey::default());
        for i in 0..=255u8 {
            let k = key(i);
            t.insert(&store, &k, &entry(&k, 10), 0).unwrap();
        }
        assert!(store.0.borrow().len() <= 16);
    }
}
