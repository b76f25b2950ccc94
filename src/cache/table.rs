//! The cache in Envoy's shared data: set-associative, bounded in bytes, with frequency-aware
//! admission.
//!
//! Envoy never frees a shared-data key, so the key space is fixed: `sets x ways` entry keys plus
//! one index record per set and one byte counter. A key's set comes from a keyed hash of its
//! digest (a client cannot aim many keys at one set); within the set it may take any way, so two
//! hot keys only compete when the whole set is hot. Where the set is full, and where the byte
//! budget is spent, the entry asked for least lately gives way, and only to a new entry asked for
//! more often (TinyLFU: a scan or a tail of one-time queries cannot flush the hot set).
//!
//! Every entry carries its key's full digest, so a race (a way rewritten between reading the
//! index and reading the way) or a damaged record is a miss, never another key's answer. The byte
//! counter is kept under compare-and-swap; a race between two stores to one way may leave it off
//! by one entry's size, which the next eviction of that way settles.

use crate::cache::entry::{DecodeError, Entry};
use crate::cache::set_index::{Placement, SetIndex, Way};
use crate::cache::sketch::FrequencySketch;
use crate::effects::store::{update, update_from, SharedStore, Snapshot, StoreError};
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

/// Short: there is one key per way, and Envoy never frees a key (nor its name).
const PREFIX: &str = "gc2/";
const BYTES_KEY: &str = "graphql-cache/v2/bytes";
/// The layout the table in shared data has (sets and ways, 8 bytes).
const LAYOUT_KEY: &str = "graphql-cache/v2/layout";
/// Ways per set: a key may sit in any of them.
pub const WAYS: u32 = 16;
/// Sets besides a new entry's own looked at when the byte budget must make room.
const ROOM_SAMPLES: u64 = 2;
/// How far a worker's count of a resident key may run ahead of what its way records before the
/// worker records it (on a hit, see `Seen::due`): recording every step would rewrite an index on
/// most hits. So a recorded count may be this much behind, and a worker that has not counted
/// the key itself reads it as this much more (see `Seen::worth`).
const RECORD_SLACK: u8 = 3;
/// A sketch counter's ceiling.
const MAX_FREQUENCY: u8 = 15;
/// At most this many entries are evicted to make room for one (bounded work per store).
const ROOM_EVICTIONS: usize = 8;
/// A refused newcomer is written to its set's index (its decision counted, the worker's counts
/// taught) once in this many refusals by a worker, counted as this many decisions: a refusal
/// otherwise costs a shared-data write, and a key that keeps being refused (a long tail asked
/// once each, an L2 fill of a full table) is refused on every request.
const REFUSALS_PER_WRITE: u8 = 8;
/// The most sets a layout can have (`MAX_SLOTS` of the configuration, in sets of one way), so
/// that a damaged layout record cannot make a sweep run for ever.
const MAX_SWEPT_SETS: u32 = 1 << 22;

/// How the table is laid out: fixed at configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub sets: u32,
    pub ways: u32,
    /// Bytes of stored entries the table holds at most.
    pub budget_bytes: u64,
}

impl Layout {
    /// `entries` ways in all (rounded up to whole sets), holding at most `budget_bytes`.
    pub fn new(entries: u32, budget_bytes: u64) -> Layout {
        let ways = WAYS.min(entries.max(1));
        Layout {
            sets: entries.max(1).div_ceil(ways),
            ways,
            budget_bytes,
        }
    }

    pub fn entries(&self) -> u64 {
        u64::from(self.sets) * u64::from(self.ways)
    }
}

/// What storing did besides storing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inserted {
    /// Not stored: everything it would have displaced is asked for at least as often.
    pub rejected: bool,
    /// Live entries displaced to make room (in the set, or for the byte budget).
    pub evicted_capacity: u32,
    /// Those entries, as their ways recorded them (their ghosts are kept: `cache::ghosts`).
    pub victims: Vec<Way>,
    /// Entries past their last serving instant whose space was taken back.
    pub evicted_expired: u32,
}

/// What one worker remembers for the table: how often keys were asked for (admission) and in
/// which way each was last found (so that a hit reads the way directly, without the index).
#[derive(Debug, Clone)]
pub struct Seen {
    sketch: FrequencySketch,
    /// Direct-mapped: `fingerprint` with its low 8 bits replaced by the frequency its way last
    /// recorded as far as this worker knows (4 bits) and the way (4 bits).
    ways: Vec<u64>,
    /// Refusals since this worker last wrote one (see [`REFUSALS_PER_WRITE`]).
    refusals: u8,
}

impl Seen {
    pub fn new(layout: &Layout) -> Seen {
        let entries = usize::try_from(layout.entries()).unwrap_or(usize::MAX);
        Seen {
            sketch: FrequencySketch::new(entries),
            ways: vec![0; entries.clamp(64, 1 << 22).next_power_of_two()],
            refusals: 0,
        }
    }

    /// Counts one request for the key of `hash` (hits served from a worker's copy included).
    pub fn count(&mut self, hash: u64) {
        self.sketch.increment(hash);
    }

    /// Whether this worker has counted the key of `hash` more often than its way records, as
    /// far as it knows: then [`SetTable::record`] tells the other workers.
    pub fn due(&self, hash: u64) -> bool {
        self.memo(hash).is_some_and(|(_, recorded)| {
            self.frequency(hash) > recorded.saturating_add(RECORD_SLACK)
        })
    }

    pub fn frequency(&self, hash: u64) -> u8 {
        self.sketch.frequency(hash)
    }

    /// Records in a set's index what this worker counted for its entries, where that is more
    /// than recorded: the next worker to weigh them knows it too. Free: the index is being
    /// rewritten anyway.
    fn teach(&self, index: &mut SetIndex) {
        for way in index.ways.iter_mut().filter(|w| w.fingerprint != 0) {
            way.frequency = way.frequency.max(self.frequency(way.fingerprint));
        }
    }

    /// What a resident entry is worth here: this worker's count, or what the workers that ask
    /// for it recorded (up to [`RECORD_SLACK`] behind their counts), whichever is more. Each
    /// worker sees only its share of the traffic (all of a key's, when one connection asks for
    /// it): without the record, a worker takes the entries other workers are asked for as cold,
    /// and the two undo each other's choices.
    fn worth(&self, way: &Way) -> u8 {
        let mine = self.frequency(way.fingerprint);
        match way.frequency > mine {
            true => way
                .frequency
                .saturating_add(RECORD_SLACK)
                .min(MAX_FREQUENCY),
            false => mine,
        }
    }

    fn way(&self, fingerprint: u64) -> Option<usize> {
        self.memo(fingerprint).map(|(way, _)| way)
    }

    fn memo(&self, fingerprint: u64) -> Option<(usize, u8)> {
        let slot = self.ways[self.slot(fingerprint)];
        (slot != 0 && slot & !0xFF == fingerprint & !0xFF)
            .then_some(((slot & 0xF) as usize, ((slot >> 4) & 0xF) as u8))
    }

    fn remember(&mut self, fingerprint: u64, way: usize, recorded: u8) {
        let slot = self.slot(fingerprint);
        self.ways[slot] = (fingerprint & !0xFF)
            | (u64::from(recorded.min(MAX_FREQUENCY)) << 4)
            | (way as u64 & 0xF);
    }

    /// Whether this refusal is the one in [`REFUSALS_PER_WRITE`] to be written.
    fn refusal_written(&mut self) -> bool {
        self.refusals = (self.refusals + 1) % REFUSALS_PER_WRITE;
        self.refusals == 0
    }

    fn slot(&self, fingerprint: u64) -> usize {
        (fingerprint >> 8) as usize & (self.ways.len() - 1)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SetTable {
    layout: Layout,
    secret: SlotKey,
}

impl SetTable {
    pub fn new(layout: Layout, secret: SlotKey) -> Self {
        SetTable { layout, secret }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The keyed hash that places `key` (its set, its fingerprint in the set, its sketch
    /// counters). Never 0, which marks an empty way.
    pub fn hash(&self, key: &CacheKey) -> u64 {
        key.placement_hash(&self.secret).max(1)
    }

    fn set_of(&self, hash: u64) -> u32 {
        // The high bits: the low ones pick the sketch's and the memo's slots.
        ((u128::from(hash) * u128::from(self.layout.sets)) >> 64) as u32
    }

    fn index_name(set: u32) -> String {
        format!("{PREFIX}{set}")
    }

    fn way_name(set: u32, way: usize) -> String {
        format!("{PREFIX}{set}/{way}")
    }

    /// The entry for `key`, as of `now_ms`. `hash` is [`SetTable::hash`] of `key`.
    pub fn lookup(
        &self,
        store: &impl SharedStore,
        seen: &mut Seen,
        key: &CacheKey,
        hash: u64,
        now_ms: u64,
    ) -> Lookup {
        let set = self.set_of(hash);
        if let Some(way) = seen.way(hash) {
            if let Some(found) = self.read_way(store, set, way, key, now_ms) {
                return found;
            }
        }
        let Some(bytes) = store.get(&Self::index_name(set)) else {
            return Lookup::Miss(MissKind::Empty);
        };
        let Ok(index) = SetIndex::decode(&bytes, self.layout.ways as usize) else {
            return Lookup::Miss(MissKind::Foreign);
        };
        let Some(way) = index.find(hash) else {
            return Lookup::Miss(MissKind::Empty);
        };
        seen.remember(hash, way, index.ways[way].frequency);
        self.read_way(store, set, way, key, now_ms)
            .unwrap_or(Lookup::Miss(MissKind::Collision))
    }

    /// The entry stored for `key`, whatever its freshness, read without counting anything (for
    /// the explain endpoint). `hash` is [`SetTable::hash`] of `key`.
    pub fn peek(
        &self,
        store: &impl SharedStore,
        key: &CacheKey,
        hash: u64,
    ) -> Result<Vec<u8>, MissKind> {
        let set = self.set_of(hash);
        let index = store.get(&Self::index_name(set)).ok_or(MissKind::Empty)?;
        let index =
            SetIndex::decode(&index, self.layout.ways as usize).map_err(|_| MissKind::Foreign)?;
        let way = index.find(hash).ok_or(MissKind::Empty)?;
        let bytes = store
            .get(&Self::way_name(set, way))
            .ok_or(MissKind::Collision)?;
        match Entry::peek(&bytes) {
            Ok(p) if p.digest == key.digest => Ok(bytes),
            _ => Err(MissKind::Collision),
        }
    }

    /// `None` when the way holds another key (or nothing readable).
    fn read_way(
        &self,
        store: &impl SharedStore,
        set: u32,
        way: usize,
        key: &CacheKey,
        now_ms: u64,
    ) -> Option<Lookup> {
        let bytes = store.get(&Self::way_name(set, way))?;
        match Entry::peek(&bytes) {
            Err(DecodeError::Empty) => None,
            Err(_) => None,
            Ok(p) if p.digest != key.digest => None,
            Ok(p) if p.expires_at_ms > now_ms => Some(Lookup::Hit(bytes)),
            Ok(p) if p.keep_until_ms > now_ms => Some(Lookup::Stale(bytes)),
            Ok(_) => Some(Lookup::Miss(MissKind::Expired)),
        }
    }

    /// Records in the key's set index that this worker counted it `hash`'s current frequency,
    /// when that is more than recorded (after [`Seen::due`] said so), so that other workers
    /// weigh it by that too.
    pub fn record(
        &self,
        store: &impl SharedStore,
        seen: &mut Seen,
        hash: u64,
    ) -> Result<(), StoreError> {
        let Some(way) = seen.way(hash) else {
            return Ok(());
        };
        let mine = seen.frequency(hash);
        let mut recorded = mine;
        update(store, &Self::index_name(self.set_of(hash)), |old| {
            let mut index = SetIndex::decode(old?, self.layout.ways as usize).ok()?;
            let at = index.find(hash)?;
            recorded = index.ways[at].frequency.max(mine);
            index.record(hash, mine).then(|| index.encode())
        })?;
        seen.remember(hash, way, recorded);
        Ok(())
    }

    /// Stores an encoded entry for `key` if the table admits it: in its set, within the byte
    /// budget, displacing only entries asked for less often.
    pub fn insert(
        &self,
        store: &impl SharedStore,
        seen: &mut Seen,
        key: &CacheKey,
        encoded: &[u8],
        now_ms: u64,
    ) -> Result<Inserted, StoreError> {
        let hash = self.hash(key);
        let Ok(peeked) = Entry::peek(encoded) else {
            return Err(StoreError::Failed);
        };
        let size = u32::try_from(encoded.len()).map_err(|_| StoreError::Failed)?;
        if u64::from(size) > self.layout.budget_bytes {
            return Ok(Inserted {
                rejected: true,
                ..Inserted::default()
            });
        }
        let frequency = seen.frequency(hash);
        let mut stored = Inserted::default();
        let newcomer = Newcomer {
            hash,
            size: u64::from(size),
            frequency,
        };
        let Some(index_read) = self.may_enter(store, &mut *seen, &newcomer, now_ms)? else {
            stored.rejected = true;
            return Ok(stored);
        };
        if !self.make_room(store, seen, &newcomer, now_ms, &mut stored)? {
            stored.rejected = true;
            return Ok(stored);
        }
        let set = self.set_of(hash);
        let new = Way {
            fingerprint: hash,
            size,
            keep_until_ms: peeked.keep_until_ms,
            frequency,
        };
        let mut placed = Placement::Reject;
        update_from(store, &Self::index_name(set), Some(index_read), |old| {
            let mut index = self.decode_or_empty(old);
            seen.teach(&mut index);
            placed = index.place(hash, frequency, now_ms, |w| seen.worth(w));
            if matches!(placed, Placement::Displace { .. } | Placement::Reject) {
                index.age();
            }
            if let Some(way) = placed_way(&placed) {
                index.ways[way] = new;
            }
            Some(index.encode())
        })?;
        let (way, old) = match placed {
            Placement::Reject => {
                stored.rejected = true;
                return Ok(stored);
            }
            Placement::Same { way, old } => (way, old),
            Placement::Free { way, old } => {
                stored.evicted_expired += u32::from(old.fingerprint != 0);
                (way, old)
            }
            Placement::Displace { way, victim } => {
                stored.evicted_capacity += 1;
                stored.victims.push(victim);
                (way, victim)
            }
        };
        store.set(&Self::way_name(set, way), encoded)?;
        seen.remember(hash, way, frequency);
        self.add_bytes(store, i64::from(size) - i64::from(old.size))?;
        Ok(stored)
    }

    /// Whether the newcomer would find a place in its own set as the set is now, checked before
    /// room is made elsewhere for it (or entries would be evicted for an entry that is then
    /// refused). A refusal is an admission decision, counted in the set's index (a sample of
    /// them, each counting for [`REFUSALS_PER_WRITE`]).
    /// `Some`: admitted, with the set's index as read (the insert's update starts from it).
    fn may_enter(
        &self,
        store: &impl SharedStore,
        seen: &mut Seen,
        newcomer: &Newcomer,
        now_ms: u64,
    ) -> Result<Option<Snapshot>, StoreError> {
        let name = Self::index_name(self.set_of(newcomer.hash));
        let read = store.get_cas(&name);
        let now = self.decode_or_empty(read.0.as_deref());
        let placed = now.place(newcomer.hash, newcomer.frequency, now_ms, |w| seen.worth(w));
        if placed != Placement::Reject {
            return Ok(Some(read));
        }
        if !seen.refusal_written() {
            return Ok(None);
        }
        update_from(store, &name, Some(read), |old| {
            let mut index = self.decode_or_empty(old);
            seen.teach(&mut index);
            index.age_by(REFUSALS_PER_WRITE);
            Some(index.encode())
        })?;
        Ok(None)
    }

    fn decode_or_empty(&self, bytes: Option<&[u8]>) -> SetIndex {
        let ways = self.layout.ways as usize;
        bytes
            .and_then(|b| SetIndex::decode(b, ways).ok())
            .unwrap_or_else(|| SetIndex::empty(ways))
    }

    /// Brings the byte count down to what leaves room for `size` more, evicting from a few sets
    /// the entries asked for least, as long as each is asked for less than the newcomer
    /// (`frequency`). `false` when room could not be made that way.
    fn make_room(
        &self,
        store: &impl SharedStore,
        seen: &Seen,
        newcomer: &Newcomer,
        now_ms: u64,
        stored: &mut Inserted,
    ) -> Result<bool, StoreError> {
        let Newcomer {
            hash,
            size,
            frequency,
        } = *newcomer;
        for attempt in 0..ROOM_EVICTIONS {
            if self.bytes(store).saturating_add(size) <= self.layout.budget_bytes {
                return Ok(true);
            }
            let Some((set, way, victim)) = self.coldest_sampled(store, seen, hash, attempt, now_ms)
            else {
                return Ok(false);
            };
            let live = victim.is_live(now_ms);
            if live && seen.worth(&victim) >= frequency {
                return Ok(false);
            }
            if self.evict(store, set, way, victim)? {
                match live {
                    true => {
                        stored.evicted_capacity += 1;
                        stored.victims.push(victim);
                    }
                    false => stored.evicted_expired += 1,
                }
            }
        }
        Ok(self.bytes(store).saturating_add(size) <= self.layout.budget_bytes)
    }

    /// Among the new entry's own set and a few others (different on each attempt), the occupied
    /// way worth least: a way past its last serving instant first, else the one asked for least.
    fn coldest_sampled(
        &self,
        store: &impl SharedStore,
        seen: &Seen,
        hash: u64,
        attempt: usize,
        now_ms: u64,
    ) -> Option<(u32, usize, Way)> {
        let sets = u64::from(self.layout.sets);
        let own = u64::from(self.set_of(hash));
        // (live, frequency, keep-until): the smallest is worth least.
        let mut best: Option<(Rank, u32, usize, Way)> = None;
        for sample in 0..=ROOM_SAMPLES {
            let step = (attempt as u64 * (ROOM_SAMPLES + 1) + sample).wrapping_mul(hash | 1);
            let set = match sample {
                0 => own,
                _ => (own + 1 + (step >> 7) % sets.max(1)) % sets.max(1),
            } as u32;
            let Some(bytes) = store.get(&Self::index_name(set)) else {
                continue;
            };
            let Ok(index) = SetIndex::decode(&bytes, self.layout.ways as usize) else {
                continue;
            };
            for (way, w) in index.ways.iter().enumerate() {
                if w.fingerprint == 0 || w.fingerprint == hash {
                    continue;
                }
                let rank = (w.is_live(now_ms), seen.worth(w), w.keep_until_ms);
                if best.as_ref().is_none_or(|(r, ..)| rank < *r) {
                    best = Some((rank, set, way, *w));
                }
            }
        }
        best.map(|(_, set, way, w)| (set, way, w))
    }

    /// Empties `way` of `set` if it still holds `victim`; `true` when it did.
    fn evict(
        &self,
        store: &impl SharedStore,
        set: u32,
        way: usize,
        victim: Way,
    ) -> Result<bool, StoreError> {
        let written = update(store, &Self::index_name(set), |old| {
            let mut index = self.decode_or_empty(old);
            (index.ways.get(way) == Some(&victim)).then(|| {
                index.ways[way] = Way::default();
                index.encode()
            })
        })?;
        if written {
            // Emptied, not removed: Envoy keeps the key, but frees the value.
            store.set(&Self::way_name(set, way), b"")?;
            self.add_bytes(store, -i64::from(victim.size))?;
        }
        Ok(written)
    }

    /// Makes shared data hold this layout's table. Shared data outlives a configuration: a table
    /// of another layout (another `cache_bytes`) is emptied first, once, by the VM that records
    /// the new layout, or its entries would hold memory nothing can reach and its byte count
    /// would be wrong. `true` when this call recorded the layout.
    pub fn adopt(&self, store: &impl SharedStore) -> Result<bool, StoreError> {
        let mine = [
            self.layout.sets.to_le_bytes(),
            self.layout.ways.to_le_bytes(),
        ]
        .concat();
        let mut previous = None;
        let recorded = update(store, LAYOUT_KEY, |old| {
            if old == Some(&mine[..]) {
                return None;
            }
            previous = old.and_then(|b| {
                let sets = u32::from_le_bytes(<[u8; 4]>::try_from(b.get(..4)?).ok()?);
                let ways = u32::from_le_bytes(<[u8; 4]>::try_from(b.get(4..8)?).ok()?);
                Some((sets, ways))
            });
            Some(mine.clone())
        })?;
        if let (true, Some((sets, ways))) = (recorded, previous) {
            Self::sweep(store, sets, ways)?;
            store.set(BYTES_KEY, &0u64.to_le_bytes())?;
        }
        Ok(recorded)
    }

    /// Empties every index and way of a `sets x ways` table (only keys that hold something:
    /// writing a key that does not exist would create it).
    fn sweep(store: &impl SharedStore, sets: u32, ways: u32) -> Result<(), StoreError> {
        let ways = ways.min(WAYS) as usize;
        for set in 0..sets.min(MAX_SWEPT_SETS) {
            let names = std::iter::once(Self::index_name(set))
                .chain((0..ways).map(|way| Self::way_name(set, way)));
            for name in names {
                if store.get(&name).is_some() {
                    store.set(&name, b"")?;
                }
            }
        }
        Ok(())
    }

    /// The bytes of entries held, as counted.
    pub fn bytes(&self, store: &impl SharedStore) -> u64 {
        store
            .get(BYTES_KEY)
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map_or(0, u64::from_le_bytes)
    }

    fn add_bytes(&self, store: &impl SharedStore, delta: i64) -> Result<(), StoreError> {
        if delta == 0 {
            return Ok(());
        }
        update(store, BYTES_KEY, |old| {
            let now = old
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes);
            Some(now.saturating_add_signed(delta).to_le_bytes().to_vec())
        })
        .map(|_| ())
    }
}

type Rank = (bool, u8, u64);

/// The entry being stored, as room is made for it.
#[derive(Debug, Clone, Copy)]
struct Newcomer {
    hash: u64,
    size: u64,
    frequency: u8,
}

fn placed_way(placement: &Placement) -> Option<usize> {
    match *placement {
        Placement::Same { way, .. }
        | Placement::Free { way, .. }
        | Placement::Displace { way, .. } => Some(way),
        Placement::Reject => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;
    use std::collections::{BTreeMap, HashMap};

    fn key(n: u64) -> CacheKey {
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&n.to_le_bytes());
        digest[8] = 0xAB;
        CacheKey { digest }
    }

    fn entry(k: &CacheKey, body: &[u8], expires: u64) -> Vec<u8> {
        Entry {
            digest: k.digest,
            stored_at_ms: 0,
            expires_at_ms: expires,
            stale_ms: 0,
            error_ms: 0,
            upstream_age_s: 0,
            born_us: 0,
            status: 200,
            headers: vec![("content-type", "application/json")],
            tag_hashes: vec![],
            tags: "",
            body,
        }
        .encode()
    }

    /// A deterministic Zipf(`skew`) trace over `keys` keys (xorshift and the inverse CDF).
    fn zipf(keys: u64, skew: f64, n: usize, seed: u64) -> Vec<u64> {
        let weights: Vec<f64> = (1..=keys).map(|k| 1.0 / (k as f64).powf(skew)).collect();
        let total: f64 = weights.iter().sum();
        let mut cdf = Vec::with_capacity(weights.len());
        let mut acc = 0.0;
        for w in weights {
            acc += w / total;
            cdf.push(acc);
        }
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                cdf.partition_point(|&c| c < u) as u64
            })
            .collect()
    }

    /// The table's hit ratio on `trace`, each miss stored (as the filter does after fetching).
    fn table_hits(table: &SetTable, trace: &[u64]) -> f64 {
        table_hits_workers(table, trace, 1)
    }

    fn lru_hits(capacity: usize, trace: &[u64]) -> f64 {
        let (mut last_use, mut by_age) = (HashMap::new(), BTreeMap::new());
        let mut hits = 0;
        for (now, &n) in trace.iter().enumerate() {
            if let Some(then) = last_use.insert(n, now) {
                by_age.remove(&then);
                hits += 1;
            } else if last_use.len() > capacity {
                if let Some((_, oldest)) = by_age.pop_first() {
                    last_use.remove(&oldest);
                }
            }
            by_age.insert(now, n);
        }
        hits as f64 / trace.len() as f64
    }

    fn table_for(entries: u32) -> SetTable {
        let size = entry(&key(0), &[b'x'; 1000], u64::MAX).len() as u64;
        SetTable::new(
            Layout::new(entries * 2, size * u64::from(entries)),
            SlotKey(7, 9),
        )
    }

    #[test]
    fn store_then_hit_then_expire() {
        let store = MapStore::default();
        let table = SetTable::new(Layout::new(64, 1 << 20), SlotKey::default());
        let mut seen = Seen::new(table.layout());
        let k = key(1);
        let h = table.hash(&k);
        assert_eq!(
            table.lookup(&store, &mut seen, &k, h, 0),
            Lookup::Miss(MissKind::Empty)
        );
        let stored = table
            .insert(&store, &mut seen, &k, &entry(&k, b"{}", 100), 0)
            .unwrap();
        assert_eq!(stored, Inserted::default());
        assert!(matches!(
            table.lookup(&store, &mut seen, &k, h, 99),
            Lookup::Hit(_)
        ));
        assert_eq!(
            table.lookup(&store, &mut seen, &k, h, 100),
            Lookup::Miss(MissKind::Expired)
        );
        // Another worker, which never saw the key, finds it through the index.
        let mut other = Seen::new(table.layout());
        assert!(matches!(
            table.lookup(&store, &mut other, &k, h, 99),
            Lookup::Hit(_)
        ));
    }

    #[test]
    fn the_byte_budget_holds_and_the_key_space_is_fixed() {
        let store = MapStore::default();
        let body = vec![b'y'; 3000];
        let size = entry(&key(0), &body, 10).len() as u64;
        let table = SetTable::new(Layout::new(64, size * 10), SlotKey(1, 2));
        let mut seen = Seen::new(table.layout());
        for n in 0..2000 {
            let k = key(n);
            seen.count(table.hash(&k));
            seen.count(table.hash(&k));
            table
                .insert(&store, &mut seen, &k, &entry(&k, &body, 10), 0)
                .unwrap();
            assert!(table.bytes(&store) <= size * 10);
        }
        let held: u64 = store
            .0
            .borrow()
            .iter()
            .filter(|(name, _)| name.matches('/').count() == 4)
            .map(|(_, (v, _))| v.len() as u64)
            .sum();
        assert!(held <= size * 10, "{held} bytes held");
        // sets x ways entry keys, an index per set, the counter.
        assert!(store.0.borrow().len() as u64 <= 64 + 4 + 1);
    }

    #[test]
    fn a_forged_or_damaged_index_is_a_miss() {
        let store = MapStore::default();
        let table = SetTable::new(Layout::new(16, 1 << 20), SlotKey::default());
        let mut seen = Seen::new(table.layout());
        let k = key(5);
        let h = table.hash(&k);
        table
            .insert(&store, &mut seen, &k, &entry(&k, b"{}", 100), 0)
            .unwrap();
        // Another key's entry written into k's way: never served for k.
        let other = key(6);
        let way = seen.way(h).unwrap();
        store
            .set(
                &SetTable::way_name(table.set_of(h), way),
                &entry(&other, b"{}", 100),
            )
            .unwrap();
        assert!(matches!(
            table.lookup(&store, &mut Seen::new(table.layout()), &k, h, 0),
            Lookup::Miss(_)
        ));
        store
            .set(&SetTable::index_name(table.set_of(h)), b"garbage")
            .unwrap();
        assert_eq!(
            table.lookup(&store, &mut Seen::new(table.layout()), &k, h, 0),
            Lookup::Miss(MissKind::Foreign)
        );
    }

    #[test]
    fn a_working_set_that_fits_is_held() {
        let trace = zipf(300, 0.7, 12_000, 1);
        let hits = table_hits(&table_for(400), &trace);
        assert!(hits >= 0.97, "{hits}");
    }

    #[test]
    fn hits_at_least_as_often_as_lru_on_skewed_traffic() {
        for skew in [0.8, 1.0] {
            let trace = zipf(4000, skew, 16_000, 3);
            let table = table_hits(&table_for(400), &trace);
            let lru = lru_hits(400, &trace);
            assert!(table >= lru, "zipf {skew}: table {table}, LRU {lru}");
        }
    }

    #[test]
    fn a_scan_does_not_flush_the_hot_set() {
        let mut trace = Vec::new();
        for round in 0..12u64 {
            trace.extend(zipf(200, 0.9, 1000, round + 10));
            // A one-time scan of 1000 cold keys between rounds: these can never hit.
            trace.extend((0..1000).map(|i| 1_000_000 + round * 1000 + i));
        }
        // Of the requests that can hit (the hot ones), the share that did.
        let of_hot = |overall: f64| overall * trace.len() as f64 / 12_000.0;
        let table = of_hot(table_hits(&table_for(400), &trace));
        let lru = of_hot(lru_hits(400, &trace));
        assert!(table >= 0.95, "table {table}");
        assert!(table > lru + 0.1, "table {table}, LRU {lru}");
    }

    #[test]
    fn a_loop_larger_than_the_cache_keeps_part_of_it() {
        let trace: Vec<u64> = (0..30).flat_map(|_| 0..440u64).collect();
        let table = table_hits(&table_for(400), &trace);
        assert!(table > 0.5, "table {table} (LRU gets 0)");
    }

    #[test]
    fn counts_causes() {
        let store = MapStore::default();
        let size = entry(&key(0), b"{}", 10).len() as u64;
        let table = SetTable::new(Layout::new(16, size * 2), SlotKey::default());
        let mut seen = Seen::new(table.layout());
        let (a, b, c) = (key(1), key(2), key(3));
        for k in [&a, &b] {
            seen.count(table.hash(k));
            table
                .insert(&store, &mut seen, k, &entry(k, b"{}", 10), 0)
                .unwrap();
        }
        // Asked once, like a and b: not admitted over them.
        seen.count(table.hash(&c));
        let r = table
            .insert(&store, &mut seen, &c, &entry(&c, b"{}", 10), 0)
            .unwrap();
        assert!(r.rejected);
        // Asked more: displaces one of them.
        seen.count(table.hash(&c));
        let r = table
            .insert(&store, &mut seen, &c, &entry(&c, b"{}", 10), 0)
            .unwrap();
        assert_eq!((r.rejected, r.evicted_capacity), (false, 1));
        // Later, everything has expired: room is taken back without a capacity eviction.
        let d = key(4);
        let r = table
            .insert(&store, &mut seen, &d, &entry(&d, b"{}", 100), 50)
            .unwrap();
        assert_eq!((r.rejected, r.evicted_capacity), (false, 0));
        assert!(r.evicted_expired >= 1);
    }

    #[test]
    fn another_layout_s_table_is_emptied_once() {
        let store = MapStore::default();
        let small = SetTable::new(Layout::new(32, 1 << 20), SlotKey::default());
        assert!(small.adopt(&store).unwrap());
        assert!(
            !small.adopt(&store).unwrap(),
            "the same layout: nothing to do"
        );
        let mut seen = Seen::new(small.layout());
        for n in 0..20 {
            let k = key(n);
            small
                .insert(&store, &mut seen, &k, &entry(&k, b"{}", 100), 0)
                .unwrap();
        }
        assert!(small.bytes(&store) > 0);
        let large = SetTable::new(Layout::new(64, 1 << 20), SlotKey::default());
        assert!(large.adopt(&store).unwrap());
        assert_eq!(large.bytes(&store), 0);
        let held = store
            .0
            .borrow()
            .iter()
            .filter(|(name, (v, _))| name.starts_with(PREFIX) && !v.is_empty())
            .count();
        assert_eq!(held, 0);
        assert!(!large.adopt(&store).unwrap());
    }

    #[test]
    fn at_the_default_shape_sets_are_not_what_limits() {
        // One slot per KiB of budget (the default) and entries of about 1.1 KiB: the bytes run
        // out before the ways do, and hot keys sharing a set do not push each other out.
        let body = vec![b'x'; 1000];
        let size = entry(&key(0), &body, u64::MAX).len() as u64;
        let table = SetTable::new(Layout::new(1200, size * 1024), SlotKey(3, 4));
        let fits = zipf(768, 0.7, 10_000, 5);
        let cold = 1.0 - fits.iter().collect::<std::collections::HashSet<_>>().len() as f64 / 1e4;
        let hits = table_hits(&table, &fits);
        assert!(hits >= cold - 0.01, "{hits} of at most {cold}");
        let skewed = zipf(10_240, 0.8, 10_000, 6);
        let (table, lru) = (table_hits(&table, &skewed), lru_hits(1024, &skewed));
        assert!(table >= lru, "table {table}, LRU {lru}");
    }

    thread_local!(static RECORDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });

    /// `table_hits` with requests dealt in turn to `workers` workers, each with its own `Seen`.
    fn table_hits_workers(table: &SetTable, trace: &[u64], workers: usize) -> f64 {
        let store = MapStore::default();
        let mut seen: Vec<Seen> = (0..workers).map(|_| Seen::new(table.layout())).collect();
        let body = vec![b'x'; 1000];
        let mut hits = 0;
        for (i, &n) in trace.iter().enumerate() {
            let s = &mut seen[i % workers];
            let k = key(n);
            let h = table.hash(&k);
            s.count(h);
            match table.lookup(&store, s, &k, h, 0) {
                Lookup::Hit(_) => {
                    hits += 1;
                    if s.due(h) {
                        RECORDS.with(|r| r.set(r.get() + 1));
                        table.record(&store, s, h).unwrap();
                    }
                }
                _ => {
                    table
                        .insert(&store, s, &k, &entry(&k, &body, u64::MAX), 0)
                        .unwrap();
                }
            }
        }
        assert!(table.bytes(&store) <= table.layout().budget_bytes);
        hits as f64 / trace.len() as f64
    }

    #[test]
    fn two_workers_agree_well_enough_on_what_to_keep() {
        // Requests alternate between two workers, each with its own sketch: entries one worker
        // stored must not look cold to the other (each way records its storer's count).
        let body = vec![b'x'; 1000];
        let size = entry(&key(0), &body, u64::MAX).len() as u64;
        let table = SetTable::new(Layout::new(1200, size * 1024), SlotKey(3, 4));
        let mut scan = Vec::new();
        for round in 0..5 {
            scan.extend(zipf(768, 0.8, 2000, 50 + round));
            scan.extend((0..1024).map(|i| 1_000_000 + round * 1024 + i));
        }
        for (name, trace) in [("scan", scan), ("zipf", zipf(10_240, 0.8, 12_000, 5))] {
            let one = table_hits_workers(&table, &trace, 1);
            let two = table_hits_workers(&table, &trace, 2);
            assert!(two >= one - 0.02, "{name}: 1 worker {one}, 2 workers {two}");
        }
    }

    #[test]
    fn two_workers_each_asked_for_its_own_keys_keep_a_loop_as_one_does() {
        // A loop of an even length dealt to two workers in turn: each key always reaches the
        // same worker, so neither has counted the other's keys at all. The ways' records carry
        // the counts across, and the two keep the same entries, cycle after cycle.
        let body = vec![b'x'; 1000];
        let size = entry(&key(0), &body, u64::MAX).len() as u64;
        let budget = size * 2048;
        let table = SetTable::new(Layout::new((budget / 1024) as u32, budget), SlotKey(3, 4));
        let trace: Vec<u64> = (0..20_000u64).map(|i| i % 2252).collect();
        let one = table_hits_workers(&table, &trace, 1);
        let two = table_hits_workers(&table, &trace, 2);
        // At most 2048 of 2252 keys fit, and the first cycle cannot hit.
        assert!(one >= 0.80, "1 worker {one}");
        assert!(two >= one - 0.01, "1 worker {one}, 2 workers {two}");
    }

    #[test]
    fn a_hit_rewrites_the_index_only_when_the_count_has_run_ahead() {
        let store = MapStore::default();
        let table = SetTable::new(Layout::new(64, 1 << 20), SlotKey::default());
        let (mut storer, mut other) = (Seen::new(table.layout()), Seen::new(table.layout()));
        let k = key(3);
        let h = table.hash(&k);
        storer.count(h);
        table
            .insert(&store, &mut storer, &k, &entry(&k, b"{}", 100), 0)
            .unwrap();
        let index = SetTable::index_name(table.set_of(h));
        let writes = || store.0.borrow()[&index].1;
        let before = writes();
        for _ in 0..15 {
            other.count(h);
            assert!(matches!(
                table.lookup(&store, &mut other, &k, h, 0),
                Lookup::Hit(_)
            ));
            if other.due(h) {
                table.record(&store, &mut other, h).unwrap();
            }
        }
        // Stored with a record of 1; counts 1 to 15 with a slack of 3: recorded at 5, 9 and 13
        // (and not again at 15).
        assert_eq!(writes() - before, 3);
        let recorded = SetIndex::decode(&store.get(&index).unwrap(), 16).unwrap();
        assert_eq!(recorded.ways[recorded.find(h).unwrap()].frequency, 13);
        // The storer, which counted the key once, now weighs it by the record.
        let way = recorded.ways[recorded.find(h).unwrap()];
        assert_eq!(storer.worth(&way), 15);
    }

    #[test]
    fn refusals_write_their_set_s_index_once_in_eight_counting_for_eight() {
        // One set of one way: a resident asked for twice, then newcomers asked for once each.
        let store = MapStore::default();
        let size = entry(&key(0), b"{}", u64::MAX).len() as u64;
        let table = SetTable::new(Layout::new(1, size), SlotKey::default());
        let mut seen = Seen::new(table.layout());
        let resident = key(1);
        let h = table.hash(&resident);
        seen.count(h);
        seen.count(h);
        let stored = table
            .insert(
                &store,
                &mut seen,
                &resident,
                &entry(&resident, b"{}", u64::MAX),
                0,
            )
            .unwrap();
        assert!(!stored.rejected);
        let index = SetTable::index_name(table.set_of(h));
        let writes = || store.0.borrow()[&index].1;
        let decisions = || {
            SetIndex::decode(&store.get(&index).unwrap(), 1)
                .unwrap()
                .decisions
        };
        let (before, decided) = (writes(), decisions());
        for n in 0..16u64 {
            let k = key(100 + n);
            seen.count(table.hash(&k));
            let stored = table
                .insert(&store, &mut seen, &k, &entry(&k, b"{}", u64::MAX), 0)
                .unwrap();
            assert!(
                stored.rejected,
                "asked for once, the newcomer does not displace"
            );
        }
        assert_eq!(writes() - before, 2, "16 refusals, 2 writes");
        assert_eq!(decisions() - decided, 16, "each write counts for 8");
    }

    #[test]
    fn a_once_hot_entry_gives_way_as_newcomers_press_on_its_set() {
        // One set of two ways, both recorded as asked for 15 times by a worker long gone.
        let store = MapStore::default();
        let table = SetTable::new(Layout::new(2, 1 << 20), SlotKey::default());
        let mut gone = Seen::new(table.layout());
        for n in [1, 2] {
            let k = key(n);
            (0..15).for_each(|_| gone.count(table.hash(&k)));
            table
                .insert(&store, &mut gone, &k, &entry(&k, b"{}", 100), 0)
                .unwrap();
        }
        // A newcomer asked for twice a round, by a worker that never saw the old ones: refused
        // while the records hold, admitted once its set has aged them.
        let mut now = Seen::new(table.layout());
        let fresh = key(9);
        let admitted_in = (1..=200).find(|_| {
            (0..2).for_each(|_| now.count(table.hash(&fresh)));
            let r = table
                .insert(&store, &mut now, &fresh, &entry(&fresh, b"{}", 100), 0)
                .unwrap();
            !r.rejected
        });
        let rounds = admitted_in.expect("never admitted");
        assert!(
            rounds > 2,
            "admitted at once ({rounds}): the records were ignored"
        );
    }
}
