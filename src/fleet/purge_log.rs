//! One node's purge as the other nodes read it from the fleet's purge log: the targets and the
//! moment they were purged (the purging node's clock), so every node marks the same instant and
//! an entry born before the purge is purged everywhere, whichever node stored it.

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
    /// The log was trimmed past the cursor: purges were missed.
    pub gap: bool,
    /// The records, oldest first; entries that do not decode are dropped (and counted by the
    /// caller as `skipped`).
    pub records: Vec<PurgeRecord>,
    pub skipped: usize,
}

#[derive(Deserialize)]
struct RawPage {
    last: String,
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

/// Reads `GET /v1/purges`'s JSON answer.
pub fn read_page(body: &[u8]) -> Option<Page> {
    let raw: RawPage = serde_json::from_slice(body).ok()?;
    if !valid_cursor(&raw.last) {
        return None;
    }
    let mut skipped = 0;
    let records = raw
        .entries
        .iter()
        .filter_map(|e| {
            let record = base64::engine::general_purpose::STANDARD
                .decode(&e.data)
                .ok()
                .and_then(|b| PurgeRecord::decode(&b));
            skipped += usize::from(record.is_none());
            record
        })
        .collect();
    Some(Page {
        cursor: raw.last,
        gap: raw.gap,
        records,
        skipped,
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

    #[test]
    fn pages_are_read_and_bad_entries_skipped() {
        let data = base64::engine::general_purpose::STANDARD.encode(record().encode().unwrap());
        let body = format!(
            r#"{{"last":"1764582000456-0","gap":false,"entries":[{{"id":"1-0","data":"{data}"}},{{"id":"2-0","data":"!!"}}]}}"#
        );
        let page = read_page(body.as_bytes()).unwrap();
        assert_eq!(page.cursor, "1764582000456-0");
        assert_eq!(page.records, vec![record()]);
        assert_eq!(page.skipped, 1);
        assert_eq!(
            read_page(br#"{"last":"0&x=1","gap":false,"entries":[]}"#),
            None
        );
        assert_eq!(read_page(b"not json"), None);
        assert!(valid_cursor("$") && valid_cursor("0") && !valid_cursor(""));
    }
}
