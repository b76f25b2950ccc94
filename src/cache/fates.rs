//! What became of the last answer for a key, so that a later miss can say exactly why it missed:
//! stored (until when it could be served), refused by admission, or not stored (why). Kept in
//! shared data, so that a miss on any worker reads what the worker that fetched learned, in a
//! fixed number of pages (bounded memory whatever the traffic): a key's page is chosen by its
//! digest, and a page keeps the newest [`PER_PAGE`] keys it was given.
//!
//! A key the pages no longer hold has no fate: its miss falls back to what this worker saw
//! (`cold` if it was not asked for here lately, else `evicted`).

use crate::cache::not_stored::NotStored;
use crate::effects::store::SharedStore;
use crate::request::key::CacheKey;

const PREFIX: &str = "graphql-cache/v2/fate/";
/// Keys per page: a page is read whole on a miss, so it stays small (17 bytes a key).
pub const PER_PAGE: usize = 16;
const VERSION: u8 = 1;
const RECORD: usize = 8 + 1 + 4 + 4;
/// The fate code of an answer stored; the others are `NotStored::code() + 1`.
const STORED: u8 = 0;

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
    /// Not stored (admission's refusal among the reasons: `NotStored::NotAdmitted`).
    NotStored(NotStored),
}

/// A key's fate, and when it was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recalled {
    pub fate: Fate,
    pub at_s: u32,
}

impl Fate {
    fn code(self) -> (u8, u32) {
        match self {
            Fate::Stored { until_s } => (STORED, until_s),
            Fate::NotStored(why) => (why.code().saturating_add(1), 0),
        }
    }

    fn from_code(code: u8, until_s: u32) -> Option<Fate> {
        match code {
            STORED => Some(Fate::Stored { until_s }),
            n => NotStored::from_code(n - 1).map(Fate::NotStored),
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

    fn page(&self, key: &CacheKey) -> Option<String> {
        if self.pages == 0 {
            return None;
        }
        let index =
            u32::from_le_bytes([key.digest[8], key.digest[9], key.digest[10], key.digest[11]]);
        Some(format!("{PREFIX}{}", index % self.pages))
    }

    /// Remembers `fate` for `key`, learned at `now_s`. A lost race or a failed write loses a
    /// hint only: tried once more on a lost race, then left.
    pub fn remember(&self, store: &impl SharedStore, key: &CacheKey, fate: Fate, now_s: u32) {
        let Some(page) = self.page(key) else { return };
        for _ in 0..2 {
            let (value, cas) = store.get_cas(&page);
            let mut records = value.as_deref().map(decode).unwrap_or_default();
            put(&mut records, fingerprint(key), fate, now_s);
            if store.set_cas(&page, &encode(&records), cas).is_ok() {
                return;
            }
        }
    }

    /// The fate remembered for `key`, if its page still holds it.
    pub fn recall(&self, store: &impl SharedStore, key: &CacheKey) -> Option<Recalled> {
        let value = store.get(&self.page(key)?)?;
        let fp = fingerprint(key);
        decode(&value)
            .into_iter()
            .find(|r| r.fingerprint == fp)
            .and_then(|r| {
                Some(Recalled {
                    fate: Fate::from_code(r.code, r.until_s)?,
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
}

fn fingerprint(key: &CacheKey) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key.digest[..8]);
    // 0 never names a key: a page of zeroes holds nothing.
    u64::from_le_bytes(b).max(1)
}

/// `fp`'s record first (replacing its old one), the oldest dropped past [`PER_PAGE`].
fn put(records: &mut Vec<Record>, fp: u64, fate: Fate, now_s: u32) {
    records.retain(|r| r.fingerprint != fp);
    let (code, until_s) = fate.code();
    records.insert(
        0,
        Record {
            fingerprint: fp,
            code,
            at_s: now_s,
            until_s,
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
            let (at, until) = c.split_at(4);
            Some(Record {
                fingerprint: u64::from_le_bytes(fp.try_into().ok()?),
                code: *code,
                at_s: u32::from_le_bytes(at.try_into().ok()?),
                until_s: u32::from_le_bytes(until.try_into().ok()?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    fn key(n: u8, page: u8) -> CacheKey {
        let mut digest = [n; 32];
        digest[8..12].copy_from_slice(&[page, 0, 0, 0]);
        CacheKey { digest }
    }

    #[test]
    fn a_key_s_last_fate_is_recalled_by_any_reader_and_another_key_s_is_not() {
        let (store, fates) = (MapStore::default(), Fates::new(64));
        let (a, b) = (key(1, 0), key(2, 0));
        assert_eq!(fates.recall(&store, &a), None);
        let errors = Fate::NotStored(NotStored::GraphqlErrors);
        fates.remember(&store, &a, errors, 10);
        assert_eq!(
            fates.recall(&store, &a),
            Some(Recalled {
                fate: errors,
                at_s: 10
            })
        );
        fates.remember(&store, &a, Fate::Stored { until_s: 70 }, 11);
        let stored = fates.recall(&store, &a).map(|r| r.fate);
        assert_eq!(
            stored,
            Some(Fate::Stored { until_s: 70 }),
            "the newest wins"
        );
        assert_eq!(fates.recall(&store, &b), None, "same page, another key");
    }

    #[test]
    fn a_page_keeps_its_newest_keys_and_memory_stays_bounded() {
        let (store, fates) = (MapStore::default(), Fates::new(16));
        let admission = Fate::NotStored(NotStored::NotAdmitted);
        for n in 1..=(PER_PAGE as u8 + 4) {
            fates.remember(&store, &key(n, 0), admission, u32::from(n));
        }
        assert_eq!(fates.recall(&store, &key(1, 0)), None, "the oldest went");
        let newest = key(PER_PAGE as u8 + 4, 0);
        assert_eq!(
            fates.recall(&store, &newest).map(|r| r.fate),
            Some(admission)
        );
        let page = fates.page(&newest).unwrap();
        assert_eq!(store.get(&page).unwrap().len(), 1 + PER_PAGE * RECORD);
        assert_eq!(fates.bytes(), (1 + PER_PAGE * RECORD) as u64);
    }

    #[test]
    fn every_reason_survives_its_code_and_a_foreign_page_reads_as_empty() {
        for why in NotStored::ALL {
            let fate = Fate::NotStored(why);
            let (code, until) = fate.code();
            assert_eq!(Fate::from_code(code, until), Some(fate));
        }
        assert_eq!(Fate::from_code(200, 0), None);
        let (store, fates) = (MapStore::default(), Fates::new(16));
        let a = key(3, 0);
        store.set(&fates.page(&a).unwrap(), b"\x02garbage").unwrap();
        assert_eq!(fates.recall(&store, &a), None);
        fates.remember(&store, &a, Fate::Stored { until_s: 5 }, 1);
        assert!(fates.recall(&store, &a).is_some(), "written over");
    }

    #[test]
    fn off_remembers_and_reads_nothing() {
        let (store, fates) = (MapStore::default(), Fates::new(0));
        fates.remember(&store, &key(1, 0), Fate::Stored { until_s: 1 }, 1);
        assert_eq!(fates.recall(&store, &key(1, 0)), None);
        assert!(!fates.is_on() && fates.bytes() == 0);
    }
}
