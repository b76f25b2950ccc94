//! What became of the last answer for a key, so that a later miss can say exactly why it missed:
//! stored (until when it could be served), refused by admission, or not stored (why). Kept in
//! shared data, so that a miss on any worker reads what the worker that fetched learned, in a
//! fixed number of pages (bounded memory whatever the traffic): a key's page is chosen by its
//! digest, and a page keeps the newest [`PER_PAGE`] keys it was given.
//!
//! A key the pages no longer hold has no fate: its miss falls back to what this worker saw
//! (`cold` if it was not asked for here lately, else `evicted`).
//!
//! Keys are named by the table's keyed hash (`SetTable::hash`), which is all the table knows of
//! the entries it evicts: an evicted entry's fate carries its ghost stamp (`cache::ghosts`).

use crate::cache::not_stored::NotStored;
use crate::effects::store::SharedStore;

const PREFIX: &str = "graphql-cache/v2/fate/";
/// Keys per page: a page is read whole on a miss, so it stays small (25 bytes a key).
pub const PER_PAGE: usize = 16;
const VERSION: u8 = 2;
/// Fingerprint, code, learned at, servable until, ghost stamp.
pub const RECORD: usize = 8 + 1 + 4 + 4 + 8;
const STORED: u8 = 0;
const EVICTED: u8 = 1;
const REFUSED: u8 = 2;
/// The codes of answers not stored are `NotStored::code()` after this.
const NOT_STORED: u8 = 3;

/// A time in ms since the epoch as the pages keep it: seconds, in 32 bits.
pub fn seconds(ms: u64) -> u32 {
    u32::try_from(ms / 1000).unwrap_or(u32::MAX)
}

/// What became of a key's last answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Stored, servable (fresh or within a stale window) until `until_s` (seconds since the
    /// epoch; 0: unknown).
    Stored { until_s: u32 },
    /// Stored, then displaced for room while still servable; `left_at`: its ghost stamp.
    Evicted { until_s: u32, left_at: u64 },
    /// Storable, and refused by admission; `left_at`: its ghost stamp.
    Refused { until_s: u32, left_at: u64 },
    /// Not storable.
    NotStored(NotStored),
}

/// A key's fate, and when it was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recalled {
    pub fate: Fate,
    pub at_s: u32,
}

impl Fate {
    fn code(self) -> (u8, u32, u64) {
        match self {
            Fate::Stored { until_s } => (STORED, until_s, 0),
            Fate::Evicted { until_s, left_at } => (EVICTED, until_s, left_at),
            Fate::Refused { until_s, left_at } => (REFUSED, until_s, left_at),
            Fate::NotStored(why) => (why.code().saturating_add(NOT_STORED), 0, 0),
        }
    }

    fn from_code(code: u8, until_s: u32, left_at: u64) -> Option<Fate> {
        match code {
            STORED => Some(Fate::Stored { until_s }),
            EVICTED => Some(Fate::Evicted { until_s, left_at }),
            REFUSED => Some(Fate::Refused { until_s, left_at }),
            n => NotStored::from_code(n - NOT_STORED).map(Fate::NotStored),
        }
    }

    /// Until when (seconds since the epoch) the answer was or would have been servable (0:
    /// unknown or not storable).
    pub fn until_s(self) -> u32 {
        match self {
            Fate::Stored { until_s }
            | Fate::Evicted { until_s, .. }
            | Fate::Refused { until_s, .. } => until_s,
            Fate::NotStored(_) => 0,
        }
    }

    /// Why the answer is not in the table since it arrived, if it never went in.
    pub fn not_stored(self) -> Option<NotStored> {
        match self {
            Fate::Refused { .. } => Some(NotStored::NotAdmitted),
            Fate::NotStored(why) => Some(why),
            Fate::Stored { .. } | Fate::Evicted { .. } => None,
        }
    }

    /// A ghost: the stamp and serving limit of an entry that left the table.
    pub fn ghost(self) -> Option<(u64, u32)> {
        match self {
            Fate::Evicted { until_s, left_at } | Fate::Refused { until_s, left_at } => {
                Some((left_at, until_s))
            }
            _ => None,
        }
    }
}

/// The pages of fates in shared data.
#[derive(Debug, Clone)]
pub struct Fates {
    pages: u32,
}

impl Fates {
    /// Room for about `keys` keys (0: off: nothing is remembered or read).
    pub fn new(keys: u32) -> Fates {
        Fates {
            pages: keys.div_ceil(PER_PAGE as u32),
        }
    }

    pub fn is_on(&self) -> bool {
        self.pages > 0
    }

    /// Shared-data bytes the pages take at most (values only; Envoy adds its own per key).
    pub fn bytes(&self) -> u64 {
        u64::from(self.pages) * (1 + PER_PAGE * RECORD) as u64
    }

    fn page(&self, hash: u64) -> Option<String> {
        if self.pages == 0 {
            return None;
        }
        // Bits neither the table's set (the high ones) nor its sketch (the low ones) uses.
        let index = (hash >> 24) as u32;
        Some(format!("{PREFIX}{}", index % self.pages))
    }

    /// Remembers `fate` for the key of table hash `hash`, learned at `now_s`. A lost race or a
    /// failed write loses a hint only: tried once more on a lost race, then left.
    pub fn remember(&self, store: &impl SharedStore, hash: u64, fate: Fate, now_s: u32) {
        let Some(page) = self.page(hash) else { return };
        for _ in 0..2 {
            let (value, cas) = store.get_cas(&page);
            let mut records = value.as_deref().map(decode).unwrap_or_default();
            put(&mut records, fingerprint(hash), fate, now_s);
            if store.set_cas(&page, &encode(&records), cas).is_ok() {
                return;
            }
        }
    }

    /// The fate remembered for the key of table hash `hash`, if its page still holds it.
    pub fn recall(&self, store: &impl SharedStore, hash: u64) -> Option<Recalled> {
        let value = store.get(&self.page(hash)?)?;
        let fp = fingerprint(hash);
        decode(&value)
            .into_iter()
            .find(|r| r.fingerprint == fp)
            .and_then(|r| {
                Some(Recalled {
                    fate: Fate::from_code(r.code, r.until_s, r.left_at)?,
                    at_s: r.at_s,
                })
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    fingerprint: u64,
    code: u8,
    at_s: u32,
    until_s: u32,
    left_at: u64,
}

fn fingerprint(hash: u64) -> u64 {
    // 0 never names a key: a page of zeroes holds nothing.
    hash.max(1)
}

/// `fp`'s record first (replacing its old one), the oldest dropped past [`PER_PAGE`].
fn put(records: &mut Vec<Record>, fp: u64, fate: Fate, now_s: u32) {
    records.retain(|r| r.fingerprint != fp);
    let (code, until_s, left_at) = fate.code();
    records.insert(
        0,
        Record {
            fingerprint: fp,
            code,
            at_s: now_s,
            until_s,
            left_at,
        },
    );
    records.truncate(PER_PAGE);
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + records.len() * RECORD);
    out.push(VERSION);
    for r in records {
        out.extend_from_slice(&r.fingerprint.to_le_bytes());
        out.push(r.code);
        out.extend_from_slice(&r.at_s.to_le_bytes());
        out.extend_from_slice(&r.until_s.to_le_bytes());
        out.extend_from_slice(&r.left_at.to_le_bytes());
    }
    out
}

/// A page as written by [`encode`]; anything else (another version, a torn value) reads as
/// empty, and is written over.
fn decode(bytes: &[u8]) -> Vec<Record> {
    let Some((&VERSION, rest)) = bytes.split_first() else {
        return Vec::new();
    };
    if rest.len() % RECORD != 0 || rest.len() / RECORD > PER_PAGE {
        return Vec::new();
    }
    rest.chunks_exact(RECORD)
        .filter_map(|c| {
            let (fp, c) = c.split_at(8);
            let (code, c) = c.split_first()?;
            let (at, c) = c.split_at(4);
            let (until, left) = c.split_at(4);
            Some(Record {
                fingerprint: u64::from_le_bytes(fp.try_into().ok()?),
                code: *code,
                at_s: u32::from_le_bytes(at.try_into().ok()?),
                until_s: u32::from_le_bytes(until.try_into().ok()?),
                left_at: u64::from_le_bytes(left.try_into().ok()?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    /// A table hash `n` landing on page `page` (of pages < 256).
    fn key(n: u8, page: u8) -> u64 {
        (u64::from(n) << 56) | (u64::from(page) << 24)
    }

    #[test]
    fn a_key_s_last_fate_is_recalled_by_any_reader_and_another_key_s_is_not() {
        let (store, fates) = (MapStore::default(), Fates::new(64));
        let (a, b) = (key(1, 0), key(2, 0));
        assert_eq!(fates.recall(&store, a), None);
        let errors = Fate::NotStored(NotStored::GraphqlErrors);
        fates.remember(&store, a, errors, 10);
        assert_eq!(
            fates.recall(&store, a),
            Some(Recalled {
                fate: errors,
                at_s: 10
            })
        );
        fates.remember(&store, a, Fate::Stored { until_s: 70 }, 11);
        let stored = fates.recall(&store, a).map(|r| r.fate);
        assert_eq!(
            stored,
            Some(Fate::Stored { until_s: 70 }),
            "the newest wins"
        );
        assert_eq!(fates.recall(&store, b), None, "same page, another key");
    }

    #[test]
    fn a_page_keeps_its_newest_keys_and_memory_stays_bounded() {
        let (store, fates) = (MapStore::default(), Fates::new(16));
        let admission = Fate::NotStored(NotStored::NotAdmitted);
        for n in 1..=(PER_PAGE as u8 + 4) {
            fates.remember(&store, key(n, 0), admission, u32::from(n));
        }
        assert_eq!(fates.recall(&store, key(1, 0)), None, "the oldest went");
        let newest = key(PER_PAGE as u8 + 4, 0);
        assert_eq!(
            fates.recall(&store, newest).map(|r| r.fate),
            Some(admission)
        );
        let page = fates.page(newest).unwrap();
        assert_eq!(store.get(&page).unwrap().len(), 1 + PER_PAGE * RECORD);
        assert_eq!(fates.bytes(), (1 + PER_PAGE * RECORD) as u64);
    }

    #[test]
    fn every_reason_survives_its_code_and_a_foreign_page_reads_as_empty() {
        let ghosts = [
            Fate::Evicted {
                until_s: 9,
                left_at: 1 << 40,
            },
            Fate::Refused {
                until_s: 8,
                left_at: 7,
            },
            Fate::Stored { until_s: 3 },
        ];
        for fate in NotStored::ALL
            .map(Fate::NotStored)
            .into_iter()
            .chain(ghosts)
        {
            let (code, until, left_at) = fate.code();
            assert_eq!(Fate::from_code(code, until, left_at), Some(fate));
        }
        assert_eq!(Fate::from_code(200, 0, 0), None);
        let (store, fates) = (MapStore::default(), Fates::new(16));
        let a = key(3, 0);
        store.set(&fates.page(a).unwrap(), b"\x02garbage").unwrap();
        assert_eq!(fates.recall(&store, a), None);
        fates.remember(&store, a, Fate::Stored { until_s: 5 }, 1);
        assert!(fates.recall(&store, a).is_some(), "written over");
    }

    #[test]
    fn off_remembers_and_reads_nothing() {
        let (store, fates) = (MapStore::default(), Fates::new(0));
        fates.remember(&store, key(1, 0), Fate::Stored { until_s: 1 }, 1);
        assert_eq!(fates.recall(&store, key(1, 0)), None);
        assert!(!fates.is_on() && fates.bytes() == 0);
    }
}
