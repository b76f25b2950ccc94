//! One node's purge as the other nodes read it from the fleet's purge log: the targets and the
//! moment they were purged (the purging node's clock), so every node marks the same instant and
//! an entry born before the purge is purged everywhere, whichever node stored it.

use crate::fleet::seal::FleetKey;
use crate::invalidate::marks::Target;
use base64::Engine;
use serde::Deserialize;

const VERSION: u8 = 1;
/// Version, time, target count.
const HEADER: usize = 1 + 8 + 2;
/// Kind and tag hash.
const TARGET_BYTES: usize = 1 + 8;
/// The L2 service takes purge bodies up to 64 KiB.
pub const MAX_TARGETS: usize = (65_536 - HEADER) / TARGET_BYTES;

/// A purge: each target, soft or hard, at `at_us` (µs since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRecord {
    pub at_us: u64,
    pub targets: Vec<(Target, bool)>,
}

impl PurgeRecord {
    /// `None` when there are more targets than one record carries (the caller splits).
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.targets.len() > MAX_TARGETS {
            return None;
        }
        let mut out = Vec::with_capacity(HEADER + TARGET_BYTES * self.targets.len());
        out.push(VERSION);
        out.extend_from_slice(&self.at_us.to_le_bytes());
        out.extend_from_slice(&(self.targets.len() as u16).to_le_bytes());
        for (target, soft) in &self.targets {
            let (kind, hash) = match target {
                Target::All => (0u8, 0u64),
                Target::Tag(h) => (2u8, *h),
            };
            out.push(kind | u8::from(*soft));
            out.extend_from_slice(&hash.to_le_bytes());
        }
        Some(out)
    }

    /// Exactly what [`PurgeRecord::encode`] writes; anything else is `None`.
    pub fn decode(bytes: &[u8]) -> Option<PurgeRecord> {
        let (&version, rest) = bytes.split_first()?;
        if version != VERSION || rest.len() < HEADER - 1 {
            return None;
        }
        let at_us = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let count = usize::from(u16::from_le_bytes(rest.get(8..10)?.try_into().ok()?));
        let body = &rest[10..];
        if count > MAX_TARGETS || body.len() != count * TARGET_BYTES {
            return None;
        }
        let targets = body
            .chunks_exact(TARGET_BYTES)
            .map(|t| {
                let hash = u64::from_le_bytes(t[1..].try_into().ok()?);
                let target = match t[0] & !1 {
                    0 if hash == 0 => Target::All,
                    2 => Target::Tag(hash),
                    _ => return None,
                };
                Some((target, t[0] & 1 == 1))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PurgeRecord { at_us, targets })
    }
}

/// Splits a purge into records the service accepts.
pub fn records(at_us: u64, targets: &[(Target, bool)]) -> Vec<Vec<u8>> {
    targets
        .chunks(MAX_TARGETS)
        .filter_map(|chunk| {
            PurgeRecord {
                at_us,
                targets: chunk.to_vec(),
            }
            .encode()
        })
        .collect()
}

/// One read of the purge log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where the next read starts.
    pub cursor: String,
    /// The log's generation: a new one means the log was lost and begun again.
    pub generation: Option<String>,
    /// Purges may have been missed: the service says so (the log was trimmed past the cursor,
    /// lost, or begun again), or a record could not be read (unsigned, signed with another key,
    /// or written by a version this one does not know).
    pub gap: bool,
    /// The records that could be read, oldest first, dated no later than the reader's `now_us`
    /// plus its skew.
    pub records: Vec<PurgeRecord>,
    /// How many entries the page held, readable or not.
    pub entries: usize,
}

#[derive(Deserialize)]
struct RawPage {
    last: String,
    #[serde(default)]
    gen: Option<String>,
    gap: bool,
    entries: Vec<RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    data: String,
}

/// A cursor goes back into a path: a stream id (`MS-SEQ`), `0` or `$`, nothing else.
pub fn valid_cursor(cursor: &str) -> bool {
    cursor == "$"
        || (!cursor.is_empty()
            && cursor.len() <= 41
            && cursor.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
}

/// A generation goes back into a path too.
pub fn valid_generation(generation: &str) -> bool {
    !generation.is_empty()
        && generation.len() <= 64
        && generation.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// How a reader takes records: whose signature it trusts, and its clock.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    pub key: &'a FleetKey,
    pub now_us: u64,
    /// How far ahead of `now_us` a record may be dated.
    pub skew_us: u64,
}

impl Reader<'_> {
    /// A record as the log holds it, opened and dated no later than now plus the skew: a
    /// record from the future would purge what is stored until then.
    pub fn record(&self, sealed: &[u8]) -> Option<PurgeRecord> {
        let mut record = PurgeRecord::decode(self.key.open_record(sealed)?)?;
        record.at_us = record.at_us.min(self.now_us.saturating_add(self.skew_us));
        Some(record)
    }
}

/// Reads `GET /v1/purges`'s JSON answer. `None` when it is not one.
pub fn read_page(body: &[u8], reader: &Reader<'_>) -> Option<Page> {
    let raw: RawPage = serde_json::from_slice(body).ok()?;
    if !valid_cursor(&raw.last) || raw.gen.as_deref().is_some_and(|g| !valid_generation(g)) {
        return None;
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let read: Vec<Option<PurgeRecord>> = raw
        .entries
        .iter()
        .map(|e| b64.decode(&e.data).ok().and_then(|b| reader.record(&b)))
        .collect();
    let unreadable = read.iter().any(Option::is_none);
    Some(Page {
        entries: read.len(),
        cursor: raw.last,
        generation: raw.gen,
        gap: raw.gap || unreadable,
        records: read.into_iter().flatten().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> PurgeRecord {
        PurgeRecord {
            at_us: 1_764_582_000_123_456,
            targets: vec![
                (Target::All, true),
                (Target::Tag(7), false),
                (Target::Tag(u64::MAX), true),
            ],
        }
    }

    #[test]
    fn a_record_decodes_to_itself_and_nothing_else_decodes() {
        let bytes = record().encode().unwrap();
        assert_eq!(PurgeRecord::decode(&bytes), Some(record()));
        for cut in 0..bytes.len() {
            assert_eq!(
                PurgeRecord::decode(&bytes[..cut]),
                None,
                "truncated at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(PurgeRecord::decode(&longer), None);
        let mut other_version = bytes.clone();
        other_version[0] = 2;
        assert_eq!(PurgeRecord::decode(&other_version), None);
        let mut bad_kind = bytes;
        bad_kind[11] = 4;
        assert_eq!(PurgeRecord::decode(&bad_kind), None);
    }

    #[test]
    fn big_purges_are_split_into_records_the_service_takes() {
        let targets: Vec<(Target, bool)> = (0..MAX_TARGETS as u64 + 5)
            .map(|h| (Target::Tag(h + 1), false))
            .collect();
        let out = records(9, &targets);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| r.len() <= 65_536));
        let back: Vec<_> = out
            .iter()
            .flat_map(|r| PurgeRecord::decode(r).unwrap().targets)
            .collect();
        assert_eq!(back, targets);
    }

    fn key(b: u8) -> FleetKey {
        FleetKey::new(&[b; 32]).unwrap()
    }

    fn page(entries: &[Vec<u8>], gap: bool) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        let entries: Vec<String> = entries
            .iter()
            .enumerate()
            .map(|(i, d)| format!(r#"{{"id":"{i}-0","data":"{}"}}"#, b64.encode(d)))
            .collect();
        format!(
            r#"{{"gen":"a1b2","last":"1764582000456-0","gap":{gap},"entries":[{}]}}"#,
            entries.join(",")
        )
    }

    #[test]
    fn pages_are_read_and_an_unreadable_record_is_a_gap() {
        let now_us = 1_764_582_000_000_000;
        let reader = Reader {
            key: &key(1),
            now_us,
            skew_us: 1_000_000,
        };
        let good = key(1).seal_record(&record().encode().unwrap());
        let p = read_page(page(std::slice::from_ref(&good), false).as_bytes(), &reader).unwrap();
        assert_eq!(p.cursor, "1764582000456-0");
        assert_eq!(p.generation.as_deref(), Some("a1b2"));
        assert_eq!((p.records.clone(), p.gap), (vec![record()], false));
        let forged = key(2).seal_record(&record().encode().unwrap());
        let unsigned = record().encode().unwrap();
        for bad in [forged, unsigned, b"!!".to_vec()] {
            let p = read_page(page(&[good.clone(), bad], false).as_bytes(), &reader).unwrap();
            assert_eq!((p.records, p.gap), (vec![record()], true));
        }
        assert!(read_page(page(&[], true).as_bytes(), &reader).unwrap().gap);
        assert_eq!(
            read_page(br#"{"last":"0&x=1","gap":false,"entries":[]}"#, &reader),
            None
        );
        assert_eq!(
            read_page(
                br#"{"gen":"a&b","last":"0","gap":false,"entries":[]}"#,
                &reader
            ),
            None
        );
        assert_eq!(read_page(b"not json", &reader), None);
        assert!(valid_cursor("$") && valid_cursor("0") && !valid_cursor(""));
    }

    #[test]
    fn a_record_from_the_future_is_dated_now_plus_the_skew() {
        let reader = Reader {
            key: &key(1),
            now_us: 5_000_000,
            skew_us: 1_000_000,
        };
        let future = PurgeRecord {
            at_us: u64::MAX,
            targets: vec![(Target::All, false)],
        };
        let sealed = key(1).seal_record(&future.encode().unwrap());
        assert_eq!(reader.record(&sealed).unwrap().at_us, 6_000_000);
        let past = PurgeRecord {
            at_us: 4_000_000,
            ..future
        };
        let sealed = key(1).seal_record(&past.encode().unwrap());
        assert_eq!(reader.record(&sealed).unwrap().at_us, 4_000_000);
    }
}
