//! Hashing for the maps a hit goes through (per-request state by context id, the per-worker
//! copies and the key memo). std's SipHash costs tens of nanoseconds per key in wasm, several
//! times per request; foldhash is several times cheaper. It is keyed with random bits drawn
//! once per worker, so a client cannot aim requests at one bucket without knowing them; where the
//! key is client-controlled the map also compares the full key, so a collision costs a probe,
//! never a wrong answer.

use foldhash::fast::SeedableRandomState;
use foldhash::SharedSeed;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// A keyed foldhash builder; every map of a worker shares its seed.
#[derive(Debug, Clone)]
pub struct Keyed(SeedableRandomState);

impl Default for Keyed {
    fn default() -> Self {
        thread_local! {
            // WASI's random_get seeds std's RandomState: random per VM.
            static SEED: u64 = RandomState::new().hash_one(0x006b_6579_6564_u64);
        }
        let seed = SEED.with(|s| *s);
        Keyed(SeedableRandomState::with_seed(
            seed,
            SharedSeed::global_fixed(),
        ))
    }
}

impl BuildHasher for Keyed {
    type Hasher = <SeedableRandomState as BuildHasher>::Hasher;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

pub type FastMap<K, V> = HashMap<K, V, Keyed>;
pub type FastSet<K> = HashSet<K, Keyed>;

/// For maps whose `u64` keys are already keyed hashes: hashing them again buys nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys come here; any other input still hashes (slowly), never wrongly.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type PreHashedMap<V> = HashMap<u64, V, BuildHasherDefault<PreHashed>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_maps_behave_as_maps_and_share_a_seed_per_worker() {
        let mut m: FastMap<u32, &str> = FastMap::default();
        m.insert(7, "a");
        m.insert(8, "b");
        assert_eq!(m.get(&7), Some(&"a"));
        assert_eq!(m.remove(&8), Some("b"));
        let (a, b) = (Keyed::default(), Keyed::default());
        assert_eq!(a.hash_one(42u32), b.hash_one(42u32));
        assert_ne!(a.hash_one(42u32), a.hash_one(43u32));
    }

    #[test]
    fn pre_hashed_keys_are_their_own_hash() {
        let mut h = PreHashed::default();
        h.write_u64(0xdead_beef);
        assert_eq!(h.finish(), 0xdead_beef);
        let mut m: PreHashedMap<u8> = PreHashedMap::default();
        m.insert(u64::MAX, 1);
        assert_eq!(m.get(&u64::MAX), Some(&1));
    }
}
