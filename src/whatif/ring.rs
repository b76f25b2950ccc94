//! The recent traffic the what-if route replays: one fixed-size record per lookup and per origin
//! answer, kept by each worker in a ring of `what_if_records` (the oldest overwritten), and
//! copied to shared data in chunks by the worker's timer, so that a what-if asked on any worker
//! replays every worker's traffic. No request's content is kept: a key's hash, its operation's
//! counter bucket (or its entity type's hash), times, sizes and lifetimes, and, while
//! `vary_headers` is set, the key's variant (a hash of the key without the vary headers, one of
//! each header's value).

use crate::request::variant::{Variant, MAX_VARY};

/// Bytes of one encoded record.
pub const RECORD: usize = 8 + 8 + 2 + 1 + 1 + 4 + 4 + 8 + 4 * MAX_VARY + 4;
/// Records per shared-data chunk (7 KiB): a chunk is rewritten whole when any of its records
/// changed since the last copy.
pub const CHUNK: usize = 256;
const VERSION: u8 = 3;
/// Set in a record's kind byte: the record is an entity's (`Record::entity`).
const ENTITY: u8 = 0x80;
const PREFIX: &str = "graphql-cache/v2/recent/";
/// The workers whose rings shared data holds (ids, 8 bytes each): at most this many.
pub const MAX_WORKERS: usize = 128;
pub const WORKERS_KEY: &str = "graphql-cache/v2/recent/workers";

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lookup served from a fresh (or stale) entry.
    Hit,
    /// A lookup that found nothing to serve.
    Miss,
    /// A lookup that found its entry purged: a miss whatever the configuration.
    Purged,
    /// A lookup answered by another request's fetch (a miss to the store, not to the origin).
    Coalesced,
    /// An origin answer stored (or storable and refused by admission): `size`, `lifetime_s`.
    Storable,
    /// An origin answer that could not be stored (`why`: `NotStored::code`).
    NotStorable,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Hit => 1,
            Kind::Miss => 2,
            Kind::Purged => 3,
            Kind::Coalesced => 4,
            Kind::Storable => 5,
            Kind::NotStorable => 6,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Hit,
            2 => Kind::Miss,
            3 => Kind::Purged,
            4 => Kind::Coalesced,
            5 => Kind::Storable,
            6 => Kind::NotStorable,
            _ => return None,
        })
    }

    pub fn is_lookup(self) -> bool {
        matches!(
            self,
            Kind::Hit | Kind::Miss | Kind::Purged | Kind::Coalesced
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub at_ms: u64,
    /// The key's table hash.
    pub hash: u64,
    /// The operation's counter bucket (`operation_stats`).
    pub op: u16,
    pub kind: Kind,
    /// Why not stored (`NotStorable`), else 0.
    pub why: u8,
    /// The entry's bytes (`Storable`, `Hit`), else 0.
    pub size: u32,
    /// The entry's freshness lifetime in seconds (`Storable`, `Hit`), else 0.
    pub lifetime_s: u32,
    /// An entity's lookup or answer (then `op` is its type's [`type_bucket`]).
    pub entity: bool,
    /// The key's variant (a lookup's, while `vary_headers` is set), else all zero.
    pub variant: Variant,
    /// A hash of a storable answer's body (`Storable`), else 0: whether keys a candidate merges
    /// answered alike.
    pub answer: u32,
}

/// The bucket an entity type's records carry: a hash of its name (no registry: the what-if
/// names the types a configuration lists, and every other type shares their default TTL).
pub fn type_bucket(typename: &str) -> u16 {
    // FNV-1a folded to 16 bits: stable across workers and builds.
    let mut h: u32 = 0x811c_9dc5;
    for b in typename.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    ((h >> 16) ^ h) as u16
}

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.at_ms.to_le_bytes());
        out.extend_from_slice(&self.hash.to_le_bytes());
        out.extend_from_slice(&self.op.to_le_bytes());
        out.push(self.kind.code() | if self.entity { ENTITY } else { 0 });
        out.push(self.why);
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.lifetime_s.to_le_bytes());
        out.extend_from_slice(&self.variant.shape.to_le_bytes());
        for v in self.variant.vary {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.answer.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Record> {
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let kind = *b.get(18)?;
        let mut vary = [0; MAX_VARY];
        for (i, v) in vary.iter_mut().enumerate() {
            *v = u32_at(36 + 4 * i)?;
        }
        Some(Record {
            at_ms: u64_at(0)?,
            hash: u64_at(8)?,
            op: u16::from_le_bytes(b.get(16..18)?.try_into().ok()?),
            kind: Kind::from_code(kind & !ENTITY)?,
            why: *b.get(19)?,
            size: u32_at(20)?,
            lifetime_s: u32_at(24)?,
            entity: kind & ENTITY != 0,
            variant: Variant {
                shape: u64_at(28)?,
                vary,
            },
            answer: u32_at(36 + 4 * MAX_VARY)?,
        })
    }
}

/// One worker's ring.
#[derive(Debug, Clone)]
pub struct Ring {
    records: Vec<Record>,
    capacity: usize,
    next: usize,
    /// Chunks written to since the last copy to shared data.
    dirty: Vec<bool>,
}

impl Ring {
    /// Room for `capacity` records (0: off, nothing is kept).
    pub fn new(capacity: usize) -> Ring {
        Ring {
            records: Vec::new(),
            capacity,
            next: 0,
            dirty: vec![false; capacity.div_ceil(CHUNK)],
        }
    }

    pub fn is_on(&self) -> bool {
        self.capacity > 0
    }

    pub fn push(&mut self, record: Record) {
        if self.capacity == 0 {
            return;
        }
        let at = self.next;
        match self.records.get_mut(at) {
            Some(slot) => *slot = record,
            None => self.records.push(record),
        }
        if let Some(d) = self.dirty.get_mut(at / CHUNK) {
            *d = true;
        }
        self.next = (at + 1) % self.capacity;
    }

    /// The chunks changed since the last call, encoded: (chunk index, value).
    pub fn take_dirty(&mut self) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for (i, d) in self.dirty.iter_mut().enumerate() {
            if !std::mem::take(d) {
                continue;
            }
            let records = self.records.iter().skip(i * CHUNK).take(CHUNK);
            let mut value = Vec::with_capacity(1 + CHUNK * RECORD);
            value.push(VERSION);
            records.for_each(|r| r.encode(&mut value));
            out.push((i, value));
        }
        out
    }

    /// Chunks a ring of this capacity writes.
    pub fn chunks(&self) -> usize {
        self.dirty.len()
    }
}

/// The shared-data key of chunk `chunk` of worker `worker`'s ring.
pub fn chunk_key(worker: u64, chunk: usize) -> String {
    format!("{PREFIX}{worker:016x}/{chunk}")
}

/// A chunk as [`Ring::take_dirty`] encodes it; anything else reads as empty.
pub fn decode_chunk(bytes: &[u8]) -> Vec<Record> {
    let Some((&VERSION, rest)) = bytes.split_first() else {
        return Vec::new();
    };
    if rest.len() % RECORD != 0 || rest.len() / RECORD > CHUNK {
        return Vec::new();
    }
    rest.chunks_exact(RECORD)
        .filter_map(Record::decode)
        .collect()
}

/// Bytes of one listed worker: its id and when it last copied its ring (seconds).
const LISTED: usize = 8 + 4;
/// A listed worker's time is rewritten at most this often (seconds): one read per copy, not a
/// write.
const SEEN_EVERY_S: u32 = 10;

/// The worker ids listed in `bytes` (the value under [`WORKERS_KEY`]).
pub fn decode_workers(bytes: &[u8]) -> Vec<u64> {
    listed(bytes).into_iter().map(|(id, _)| id).collect()
}

fn listed(bytes: &[u8]) -> Vec<(u64, u32)> {
    bytes
        .chunks_exact(LISTED)
        .filter_map(|c| {
            let id = u64::from_le_bytes(c.get(..8)?.try_into().ok()?);
            let seen = u32::from_le_bytes(c.get(8..)?.try_into().ok()?);
            Some((id, seen))
        })
        .take(MAX_WORKERS)
        .collect()
}

/// `workers` with `id` listed as seen at `now_s` (`None`: nothing to write). When the list is
/// full, the worker seen longest ago (a VM that went away with an old configuration) gives way.
pub fn with_worker(workers: &[u8], id: u64, now_s: u32) -> Option<Vec<u8>> {
    let mut all = listed(workers);
    match all.iter().position(|(w, _)| *w == id) {
        Some(i) if now_s.saturating_sub(all[i].1) < SEEN_EVERY_S => return None,
        Some(i) => all[i].1 = now_s,
        None if all.len() < MAX_WORKERS => all.push((id, now_s)),
        None => {
            let oldest = (0..all.len()).min_by_key(|&i| all[i].1)?;
            all[oldest] = (id, now_s);
        }
    }
    let mut out = Vec::with_capacity(all.len() * LISTED);
    for (w, seen) in all {
        out.extend_from_slice(&w.to_le_bytes());
        out.extend_from_slice(&seen.to_le_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u64, kind: Kind) -> Record {
        Record {
            at_ms: n,
            hash: n * 7,
            op: 3,
            kind,
            why: 0,
            size: 100,
            lifetime_s: 10,
            entity: n % 2 == 1,
            variant: Variant {
                shape: n * 11,
                vary: [n as u32, 0, 7, u32::MAX],
            },
            answer: n as u32 ^ 0xabcd,
        }
    }

    #[test]
    fn a_ring_keeps_its_newest_records_and_copies_only_changed_chunks() {
        let mut ring = Ring::new(CHUNK * 2);
        for n in 0..(CHUNK as u64 * 2 + 5) {
            ring.push(rec(n, Kind::Hit));
        }
        let dirty = ring.take_dirty();
        assert_eq!(dirty.len(), 2);
        let first = decode_chunk(&dirty[0].1);
        assert_eq!(first.len(), CHUNK);
        assert_eq!(
            first[0],
            rec(CHUNK as u64 * 2, Kind::Hit),
            "overwritten by the newest"
        );
        assert_eq!(first[5], rec(5, Kind::Hit), "the oldest kept");
        assert!(ring.take_dirty().is_empty());
        ring.push(rec(9_999, Kind::Miss));
        let again = ring.take_dirty();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, 0);
    }

    #[test]
    fn every_kind_survives_its_encoding_and_garbage_reads_as_nothing() {
        let kinds = [
            Kind::Hit,
            Kind::Miss,
            Kind::Purged,
            Kind::Coalesced,
            Kind::Storable,
            Kind::NotStorable,
        ];
        let mut ring = Ring::new(16);
        kinds
            .iter()
            .enumerate()
            .for_each(|(i, k)| ring.push(rec(i as u64, *k)));
        let chunk = &ring.take_dirty()[0].1;
        let back: Vec<Kind> = decode_chunk(chunk).iter().map(|r| r.kind).collect();
        assert_eq!(back, kinds);
        assert!(decode_chunk(b"\x09garbage").is_empty());
        assert!(decode_chunk(&chunk[..chunk.len() - 1]).is_empty());
    }

    #[test]
    fn off_keeps_nothing() {
        let mut ring = Ring::new(0);
        ring.push(rec(1, Kind::Hit));
        assert!(!ring.is_on() && ring.take_dirty().is_empty() && ring.chunks() == 0);
    }

    #[test]
    fn workers_are_listed_once_and_the_one_seen_longest_ago_gives_way() {
        let one = with_worker(b"", 5, 100).unwrap();
        assert_eq!(with_worker(&one, 5, 105), None, "seen lately: no write");
        let again = with_worker(&one, 5, 200).unwrap();
        assert_eq!(listed(&again), [(5, 200)]);
        let two = with_worker(&again, 6, 201).unwrap();
        assert_eq!(decode_workers(&two), [5, 6]);
        let mut full = Vec::new();
        for id in 0..MAX_WORKERS as u64 {
            full = with_worker(&full, id + 100, 1_000 + id as u32).unwrap();
        }
        let replaced = with_worker(&full, 1, 5_000).unwrap();
        let ids = decode_workers(&replaced);
        assert_eq!(ids.len(), MAX_WORKERS);
        assert!(ids.contains(&1) && !ids.contains(&100), "the oldest went");
        assert!(decode_workers(b"short").is_empty());
    }
}
