//! Purge marks in bounded memory. A fixed number of tag slots (`tag_slots`, addressed by the
//! tag's hash) each remember when they were last purged, hard and soft; one more pair covers
//! `all`. An entry remembers its tags' hashes and when its answer was fetched ("born"): it is
//! purged when any of its slots was purged at or after its birth. Two tags in one slot purge too
//! much, never too little, and a fetch that started before a purge is purged by it even if it is
//! stored after it.
//!
//! Every worker keeps a [`PurgeView`] of the table and rereads it only when the epoch (a small
//! counter bumped by every purge, read once per lookup) has moved.

use crate::effects::store::{update, SharedStore, StoreError, CREATE_CAS};
use crate::fast_hash::Keyed;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;

const TABLE_KEY: &str = "graphql-cache/v1/purge/table";
const EPOCH_KEY: &str = "graphql-cache/v1/purge/epoch";
const MAGIC: &[u8; 4] = b"GQLP";
const VERSION: u8 = 1;
/// Magic, version, slot count, `all`'s marks, number of slots listed.
const HEADER: usize = 4 + 1 + 4 + 16 + 4;
/// Slot index and its marks.
const SLOT_BYTES: usize = 4 + 16;

/// When a slot (or `all`) was last purged, in µs since the epoch; 0 = never. Microseconds,
/// because a lookup right after a purge's answer must be told apart from one just before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    pub hard_us: u64,
    pub soft_us: u64,
}

impl Marks {
    fn mark(&mut self, soft: bool, now_us: u64) {
        let at = if soft {
            &mut self.soft_us
        } else {
            &mut self.hard_us
        };
        *at = (*at).max(now_us);
    }
}

/// What a purge applies to: a tag (by its hash), or everything. Defined by the wire contract,
/// because a purge record carries it to the fleet's other Envoys.
pub use l2_proto::purge::Target;

/// A tag's hash, as entries store it (SHA-256, so a client cannot cheaply choose tags that land
/// in the slot of a tag it wants to keep from being purged... or purged with it). The slot is the
/// hash modulo the slot count in force, so entries stored before a `tag_slots` change still meet
/// the purges made after it.
pub fn tag_hash(tag: &str) -> u64 {
    RECENT_TAGS.with(|recent| recent.borrow_mut().hash(tag))
}

fn digest_head(tag: &str) -> u64 {
    let digest = Sha256::digest(tag.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(head)
}

/// Slots of [`RecentTags`]: at most [`RECENT_TAG_BYTES`] and about 40 bytes more each.
const RECENT_TAG_SLOTS: usize = 1024;
/// Longer tags (an origin's long ids, a purge's) are hashed every time, not remembered.
const RECENT_TAG_BYTES: usize = 128;

thread_local! {
    static RECENT_TAGS: RefCell<RecentTags> = RefCell::new(RecentTags::new(RECENT_TAG_SLOTS));
}

/// The hashes of tags this worker hashed lately, one per slot (the newest wins): answers name
/// the same types, and the same entities again and again, and a tag's SHA-256 costs more than
/// the rest of its way into an entry. A slot compares the whole tag, so a slot shared by two
/// tags costs a digest, never a wrong hash.
struct RecentTags {
    slots: Vec<Option<(Box<str>, u64)>>,
    place: Keyed,
}

impl RecentTags {
    fn new(slots: usize) -> RecentTags {
        RecentTags {
            slots: vec![None; slots.max(1)],
            place: Keyed::default(),
        }
    }

    fn hash(&mut self, tag: &str) -> u64 {
        if tag.len() > RECENT_TAG_BYTES {
            return digest_head(tag);
        }
        let at = (self.place.hash_one(tag) % self.slots.len() as u64) as usize;
        let Some(slot) = self.slots.get_mut(at) else {
            return digest_head(tag);
        };
        match slot {
            Some((known, hash)) if **known == *tag => *hash,
            _ => {
                let hash = digest_head(tag);
                *slot = Some((tag.into(), hash));
                hash
            }
        }
    }
}

/// What the marks say of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fresh,
    /// Soft-purged: stale, kept for stale serving, not served as fresh.
    Stale,
    Purged,
}

/// The table as one worker last read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeView {
    pub epoch: u64,
    /// The slot count the view was read with.
    pub slot_count: u32,
    pub all: Marks,
    pub slots: HashMap<u32, Marks>,
}

impl PurgeView {
    /// The verdict for an entry born at `born_us` with these tag hashes.
    pub fn verdict(&self, born_us: u64, tags: impl IntoIterator<Item = u64>) -> Verdict {
        let mut stale = self.all.soft_us >= born_us && self.all.soft_us > 0;
        if self.all.hard_us >= born_us && self.all.hard_us > 0 {
            return Verdict::Purged;
        }
        if self.slots.is_empty() {
            return if stale {
                Verdict::Stale
            } else {
                Verdict::Fresh
            };
        }
        let count = u64::from(self.slot_count.max(1));
        for hash in tags {
            if let Some(m) = self.slots.get(&((hash % count) as u32)) {
                if m.hard_us >= born_us && m.hard_us > 0 {
                    return Verdict::Purged;
                }
                stale |= m.soft_us >= born_us && m.soft_us > 0;
            }
        }
        if stale {
            Verdict::Stale
        } else {
            Verdict::Fresh
        }
    }

    /// The latest hard purge of any target (0: none).
    pub fn latest_hard_us(&self) -> u64 {
        self.slots
            .values()
            .map(|m| m.hard_us)
            .fold(self.all.hard_us, u64::max)
    }

    /// The table as stored in shared data.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.slots.len() * SLOT_BYTES);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.slot_count.to_le_bytes());
        out.extend_from_slice(&self.all.hard_us.to_le_bytes());
        out.extend_from_slice(&self.all.soft_us.to_le_bytes());
        let mut slots: Vec<_> = self.slots.iter().collect();
        slots.sort_unstable_by_key(|(s, _)| **s);
        out.extend_from_slice(&(slots.len() as u32).to_le_bytes());
        for (slot, m) in slots {
            out.extend_from_slice(&slot.to_le_bytes());
            out.extend_from_slice(&m.hard_us.to_le_bytes());
            out.extend_from_slice(&m.soft_us.to_le_bytes());
        }
        out
    }

    /// `None` for anything this version did not write. A table written with another slot count
    /// (before a reload that changed `tag_slots`) cannot be mapped slot by slot: its marks count
    /// for everything (too much, never too little).
    pub fn decode(bytes: &[u8], slot_count: u32) -> Option<PurgeView> {
        if bytes.get(..4)? != MAGIC || *bytes.get(4)? != VERSION {
            return None;
        }
        let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let written_with = u32_at(5)?;
        let mut all = Marks {
            hard_us: u64_at(9)?,
            soft_us: u64_at(17)?,
        };
        let n = u32_at(25)? as usize;
        // The length check bounds the allocation by the bytes actually there.
        if bytes.len() != HEADER.saturating_add(n.saturating_mul(SLOT_BYTES)) {
            return None;
        }
        let mut slots: HashMap<u32, Marks> = HashMap::new();
        for i in 0..n {
            let at = HEADER + i * SLOT_BYTES;
            let marks = Marks {
                hard_us: u64_at(at + 4)?,
                soft_us: u64_at(at + 12)?,
            };
            let into = if written_with == slot_count {
                slots.entry(u32_at(at)?).or_default()
            } else {
                &mut all
            };
            into.hard_us = into.hard_us.max(marks.hard_us);
            into.soft_us = into.soft_us.max(marks.soft_us);
        }
        Some(PurgeView {
            epoch: 0,
            slot_count,
            all,
            slots,
        })
    }
}

/// The marks in shared data.
#[derive(Debug, Clone, Copy)]
pub struct PurgeTable {
    slots: u32,
}

impl PurgeTable {
    pub fn new(slots: u32) -> Self {
        PurgeTable {
            slots: slots.max(1),
        }
    }

    fn slot(&self, hash: u64) -> u32 {
        (hash % u64::from(self.slots)) as u32
    }

    /// Creates the two keys, so that updates can use CAS. Called at configuration time.
    pub fn precreate(&self, store: &impl SharedStore) {
        for key in [TABLE_KEY, EPOCH_KEY] {
            if store.get_cas(key) == (None, None) {
                let _ = store.set_cas(key, b"", Some(CREATE_CAS));
            }
        }
    }

    /// The current epoch: one small read, made on every lookup.
    pub fn epoch(&self, store: &impl SharedStore) -> u64 {
        store
            .get(EPOCH_KEY)
            .and_then(|b| Some(u64::from_le_bytes(b.as_slice().try_into().ok()?)))
            .unwrap_or(0)
    }

    /// The table, read whole, labelled with the epoch read just before it.
    pub fn view(&self, store: &impl SharedStore, epoch: u64) -> PurgeView {
        let mut view = store
            .get(TABLE_KEY)
            .and_then(|b| PurgeView::decode(&b, self.slots))
            .unwrap_or_default();
        view.epoch = epoch;
        view.slot_count = self.slots;
        view
    }

    /// Marks `targets` purged at `now_us`, then moves the epoch. When this returns `Ok`, every
    /// later lookup on any worker sees the purge.
    pub fn apply(
        &self,
        store: &impl SharedStore,
        targets: &[(Target, bool)],
        now_us: u64,
    ) -> Result<(), StoreError> {
        let timed: Vec<(Target, bool, u64)> =
            targets.iter().map(|&(t, soft)| (t, soft, now_us)).collect();
        self.apply_at(store, &timed).map(|_| ())
    }

    /// Marks each target purged at its own time (purges another node made, as its purge log
    /// says). Marks only move forward, so applying a purge again changes nothing: then neither
    /// the table nor the epoch is written. `Ok(true)` when something changed.
    pub fn apply_at(
        &self,
        store: &impl SharedStore,
        targets: &[(Target, bool, u64)],
    ) -> Result<bool, StoreError> {
        let changed = update(store, TABLE_KEY, |old| {
            let before = old.and_then(|b| PurgeView::decode(b, self.slots));
            let mut view = before.clone().unwrap_or_default();
            view.slot_count = self.slots;
            for &(target, soft, at_us) in targets {
                match target {
                    Target::All => view.all.mark(soft, at_us),
                    Target::Tag(hash) => view
                        .slots
                        .entry(self.slot(hash))
                        .or_default()
                        .mark(soft, at_us),
                }
            }
            (before.as_ref() != Some(&view)).then(|| view.encode())
        })?;
        if !changed {
            return Ok(false);
        }
        update(store, EPOCH_KEY, |old| {
            let epoch = old
                .and_then(|b| Some(u64::from_le_bytes(b.try_into().ok()?)))
                .unwrap_or(0);
            Some(epoch.wrapping_add(1).to_le_bytes().to_vec())
        })?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn a_tag_hashes_alike_whether_remembered_or_not() {
        // Two slots for 200 tags: most lookups find another tag in their slot.
        let mut recent = RecentTags::new(2);
        let tags: Vec<String> = (0..200).map(|i| format!("entity:User:{i}")).collect();
        for _ in 0..3 {
            for tag in &tags {
                assert_eq!(recent.hash(tag), digest_head(tag), "{tag}");
                assert_eq!(tag_hash(tag), digest_head(tag), "{tag}");
            }
        }
        // The value entries and purge records carry: SHA-256's first 8 bytes, little-endian.
        assert_eq!(tag_hash(""), 0x141c_fc98_42c4_b0e3);
        // A long tag is hashed alike, and not kept.
        let long = format!("entity:User:{}", "9".repeat(RECENT_TAG_BYTES));
        assert_eq!(recent.hash(&long), digest_head(&long));
        assert!(recent
            .slots
            .iter()
            .flatten()
            .all(|(t, _)| t.len() <= RECENT_TAG_BYTES));
    }

    #[test]
    fn a_purge_reaches_entries_born_before_it_and_only_those() {
        let store = MapStore::default();
        let t = PurgeTable::new(64);
        t.precreate(&store);
        let user = tag_hash("entity:User:1");
        let post = tag_hash("entity:Post:1");
        assert_ne!(user % 64, post % 64);
        assert_eq!(t.epoch(&store), 0);
        t.apply(&store, &[(Target::Tag(user), false)], 100).unwrap();
        assert_eq!(t.epoch(&store), 1);
        let v = t.view(&store, 1);
        assert_eq!(v.verdict(99, [user]), Verdict::Purged, "fetched before");
        assert_eq!(
            v.verdict(100, [user]),
            Verdict::Purged,
            "same instant: purged"
        );
        assert_eq!(v.verdict(101, [user]), Verdict::Fresh, "fetched after");
        assert_eq!(
            v.verdict(50, [post]),
            Verdict::Fresh,
            "other tags untouched"
        );
    }

    #[test]
    fn soft_and_all() {
        let store = MapStore::default();
        let t = PurgeTable::new(8);
        t.apply(&store, &[(Target::Tag(3), true)], 100).unwrap();
        let v = t.view(&store, t.epoch(&store));
        assert_eq!(v.verdict(50, [3]), Verdict::Stale);
        assert_eq!(
            v.verdict(50, [11]),
            Verdict::Stale,
            "11 shares slot 3: too much"
        );
        assert_eq!(v.verdict(50, [4]), Verdict::Fresh);
        t.apply(&store, &[(Target::All, true)], 200).unwrap();
        let v = t.view(&store, t.epoch(&store));
        assert_eq!(v.verdict(150, [4]), Verdict::Stale);
        t.apply(&store, &[(Target::All, false)], 300).unwrap();
        let v = t.view(&store, t.epoch(&store));
        assert_eq!(v.verdict(250, [] as [u64; 0]), Verdict::Purged);
        assert_eq!(v.verdict(301, [3]), Verdict::Fresh);
        assert_eq!(t.epoch(&store), 3, "works without precreate");
    }

    #[test]
    fn memory_is_bounded_by_the_slot_count_whatever_the_tags() {
        let store = MapStore::default();
        let t = PurgeTable::new(16);
        for i in 0..1000 {
            let hash = tag_hash(&format!("entity:User:{i}"));
            t.apply(&store, &[(Target::Tag(hash), false)], i + 1)
                .unwrap();
        }
        let v = t.view(&store, 0);
        assert!(v.slots.len() <= 16);
        assert_eq!(store.0.borrow().len(), 2, "two keys in shared data");
        // Read with fewer slots (a smaller tag_slots after a reload), the marks fold and still
        // reach entries stored before.
        let small = PurgeTable::new(4).view(&store, 0);
        assert!(small.slots.is_empty(), "folded into all");
        assert_eq!(
            small.verdict(999, [tag_hash("entity:User:999")]),
            Verdict::Purged
        );
    }

    #[test]
    fn foreign_or_truncated_tables_read_as_empty() {
        let view = PurgeView {
            epoch: 0,
            slot_count: 8,
            all: Marks {
                hard_us: 1,
                soft_us: 2,
            },
            slots: [(
                3,
                Marks {
                    hard_us: 5,
                    soft_us: 0,
                },
            )]
            .into_iter()
            .collect(),
        };
        let bytes = view.encode();
        assert_eq!(PurgeView::decode(&bytes, 8), Some(view));
        for len in 0..bytes.len() {
            assert_eq!(PurgeView::decode(&bytes[..len], 8), None, "len {len}");
        }
        let other = PurgeView::decode(&bytes, 2).unwrap();
        assert!(
            other.slots.is_empty(),
            "another slot count: everything counts for all"
        );
        assert_eq!(other.all.hard_us, 5);
    }
}
