//! The fleet's durable purge state: `POST /v1/marks` and `GET /v1/marks`.
//!
//! A purge travels as *marks*: one sealed [`PurgeRecord`] per target (the filter seals each with
//! the fleet key; a record of one target, so that every mark can be checked on its own). The
//! service appends each mark to the purge log (one stream entry each, numbered by the log's own
//! sequence, so that a reader sees a record missing from the middle of the log) and keeps the
//! newest mark of every target in a snapshot beside the log (a Redis hash, each field expiring
//! `keep_ms` after its purge: the longest an entry it could purge may live). A reader that starts
//! late, or finds a gap in the log, reads the snapshot and follows the log from where the
//! snapshot was taken: every purge whose target could still be stored, without purging
//! everything.
//!
//! `POST /v1/marks` body (little-endian): version `1`, `keep_ms` (u64), mark count (u16), then
//! each mark as its length (u16) and its bytes: [`SEAL_HEADER_BYTES`] of seal (magic and MAC),
//! then a [`PurgeRecord`] of exactly one target. The service reads the record's instant and
//! target in clear (a seal is a MAC, not encryption) to name the snapshot's field and keep the
//! newest; it cannot forge a mark, and readers check every one.
//!
//! Answers: `POST` `{"gen":G,"last":ID,"n":N}` (the log's generation, the last entry's id and
//! sequence number); `GET /v1/marks?cursor=C` `{"gen":G,"cursor":C,"tip":ID,"n":N,"entries":[..]}`
//! (entries as the log's, each with the id of the log entry that wrote it; `cursor` `"0"` when the
//! snapshot has been read whole; `tip` and `n`: where the log stood when the first page was read).

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::limits::{valid_cursor, valid_generation};
use crate::purge::{PurgeRecord, Target};
use crate::purges::PurgeEntry;

const VERSION: u8 = 1;
/// Version, `keep_ms`, mark count.
const HEADER: usize = 1 + 8 + 2;
/// What a sealed value starts with before the value itself: the filter's magic (4 bytes) and
/// HMAC-SHA-256 (32).
pub const SEAL_HEADER_BYTES: usize = 4 + 32;
/// A mark: the seal and a record of one target (version, instant, count, kind and hash).
pub const MARK_BYTES: usize = SEAL_HEADER_BYTES + 1 + 8 + 2 + 1 + 8;
/// Most marks one `POST /v1/marks` carries.
pub const MAX_MARKS_PER_BATCH: usize = 2048;
/// Largest `POST /v1/marks` body.
pub const MAX_MARKS_BODY_BYTES: usize = HEADER + MAX_MARKS_PER_BATCH * (2 + MARK_BYTES);
/// About how many entries one `GET /v1/marks` page answers (Redis's `HSCAN` promises no exact
/// count; what the service does promise is [`MAX_MARKS_PAGE_BYTES`]).
pub const MARKS_PER_PAGE: usize = 1000;
/// Largest `GET /v1/marks` answer a reader takes.
pub const MAX_MARKS_PAGE_BYTES: usize = 1 << 20;
/// Shortest and longest time a snapshot field is kept.
pub const MIN_KEEP_MS: u64 = 1_000;
pub const MAX_KEEP_MS: u64 = crate::limits::MAX_TTL_MS;

/// One mark as the service reads it: the sealed bytes, and what they say in clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub sealed: Vec<u8>,
    pub at_us: u64,
    pub target: Target,
    pub soft: bool,
}

impl Mark {
    /// Reads a mark's clear part: a record of exactly one target after the seal.
    pub fn read(sealed: &[u8]) -> Result<Mark, DecodeError> {
        if sealed.len() != MARK_BYTES {
            return Err(DecodeError::Malformed("mark length"));
        }
        let record = PurgeRecord::decode(&sealed[SEAL_HEADER_BYTES..])?;
        let [(target, soft)] = record.targets[..] else {
            return Err(DecodeError::Malformed("mark target count"));
        };
        Ok(Mark {
            sealed: sealed.to_vec(),
            at_us: record.at_us,
            target,
            soft,
        })
    }

    /// The snapshot field this mark lives in: one per target and kind (hard, soft), so a newer
    /// mark of the same target replaces an older one. 9 bytes, never the snapshot's own fields.
    pub fn field(&self) -> [u8; 9] {
        let (kind, hash) = match self.target {
            Target::All => (0u8, 0u64),
            Target::Tag(h) => (2u8, h),
        };
        let mut out = [0u8; 9];
        out[0] = kind | u8::from(self.soft);
        out[1..].copy_from_slice(&hash.to_le_bytes());
        out
    }
}

/// The body of `POST /v1/marks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarksBatch {
    /// How long the snapshot keeps these marks (clamped to [`MIN_KEEP_MS`]..=[`MAX_KEEP_MS`]).
    pub keep_ms: u64,
    pub marks: Vec<Mark>,
}

impl MarksBatch {
    /// `None` for no marks, or more than [`MAX_MARKS_PER_BATCH`], or a mark of another size.
    pub fn encode(keep_ms: u64, sealed: &[Vec<u8>]) -> Option<Vec<u8>> {
        if sealed.is_empty()
            || sealed.len() > MAX_MARKS_PER_BATCH
            || sealed.iter().any(|m| m.len() != MARK_BYTES)
        {
            return None;
        }
        let mut out = Vec::with_capacity(HEADER + sealed.len() * (2 + MARK_BYTES));
        out.push(VERSION);
        out.extend_from_slice(&keep_ms.to_le_bytes());
        out.extend_from_slice(&(sealed.len() as u16).to_le_bytes());
        for m in sealed {
            out.extend_from_slice(&(m.len() as u16).to_le_bytes());
            out.extend_from_slice(m);
        }
        Some(out)
    }

    /// Exactly what [`MarksBatch::encode`] writes, every mark readable; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<MarksBatch, DecodeError> {
        if bytes.len() > MAX_MARKS_BODY_BYTES {
            return Err(DecodeError::TooLarge {
                limit: MAX_MARKS_BODY_BYTES,
            });
        }
        let (&version, rest) = bytes
            .split_first()
            .ok_or(DecodeError::Malformed("marks header"))?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let (keep, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(DecodeError::Malformed("marks header"))?;
        let (count, mut rest) = rest
            .split_first_chunk::<2>()
            .ok_or(DecodeError::Malformed("marks header"))?;
        let count = usize::from(u16::from_le_bytes(*count));
        if count == 0 || count > MAX_MARKS_PER_BATCH {
            return Err(DecodeError::Malformed("marks count"));
        }
        let mut marks = Vec::with_capacity(count);
        for _ in 0..count {
            let (len, tail) = rest
                .split_first_chunk::<2>()
                .ok_or(DecodeError::Malformed("mark length"))?;
            let len = usize::from(u16::from_le_bytes(*len));
            let mark = tail
                .get(..len)
                .ok_or(DecodeError::Malformed("mark length"))?;
            marks.push(Mark::read(mark)?);
            rest = &tail[len..];
        }
        if !rest.is_empty() {
            return Err(DecodeError::Malformed("marks count"));
        }
        Ok(MarksBatch {
            keep_ms: u64::from_le_bytes(*keep).clamp(MIN_KEEP_MS, MAX_KEEP_MS),
            marks,
        })
    }
}

/// The answer of `POST /v1/marks`: the log holds every mark of the batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarksAdded {
    #[serde(rename = "gen")]
    pub generation: String,
    /// The last entry's id.
    pub last: String,
    /// The last entry's sequence number.
    pub n: u64,
}

impl MarksAdded {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn decode(body: &[u8]) -> Result<MarksAdded, DecodeError> {
        if body.len() > 4096 {
            return Err(DecodeError::TooLarge { limit: 4096 });
        }
        let added: MarksAdded =
            serde_json::from_slice(body).map_err(|_| DecodeError::Malformed("marks answer"))?;
        if !valid_generation(&added.generation) || !valid_cursor(&added.last) || added.last == "$" {
            return Err(DecodeError::Malformed("marks answer"));
        }
        Ok(added)
    }
}

/// One page of `GET /v1/marks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarksPage {
    #[serde(rename = "gen")]
    pub generation: String,
    /// Where the next page starts; `"0"`: the snapshot was read whole.
    pub cursor: String,
    /// The log's newest entry id when the snapshot's first page was read (`"0"`: none yet):
    /// the reader follows the log from there.
    pub tip: String,
    /// The log's sequence number at `tip`.
    pub n: u64,
    pub entries: Vec<PurgeEntry>,
}

impl MarksPage {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `cursor` must be a decimal number, `tip` a stream id, `gen` a generation: each may go
    /// back into a path.
    #[inline]
    pub fn decode(body: &[u8]) -> Result<MarksPage, DecodeError> {
        if body.len() > MAX_MARKS_PAGE_BYTES {
            return Err(DecodeError::TooLarge {
                limit: MAX_MARKS_PAGE_BYTES,
            });
        }
        let page: MarksPage =
            serde_json::from_slice(body).map_err(|_| DecodeError::Malformed("marks page"))?;
        if !valid_scan_cursor(&page.cursor) {
            return Err(DecodeError::Malformed("marks page cursor"));
        }
        if !valid_cursor(&page.tip) || page.tip == "$" {
            return Err(DecodeError::Malformed("marks page tip"));
        }
        if !valid_generation(&page.generation) {
            return Err(DecodeError::Malformed("marks page gen"));
        }
        Ok(page)
    }
}

/// A snapshot cursor (Redis `HSCAN`'s): a decimal u64.
pub fn valid_scan_cursor(cursor: &str) -> bool {
    cursor.bytes().all(|b| b.is_ascii_digit()) && cursor.parse::<u64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_us: u64, target: Target, soft: bool) -> Vec<u8> {
        let record = PurgeRecord {
            at_us,
            targets: vec![(target, soft)],
        };
        let mut sealed = vec![0xAB; SEAL_HEADER_BYTES];
        sealed.extend_from_slice(&record.encode().unwrap());
        sealed
    }

    #[test]
    fn a_batch_round_trips_and_names_its_fields() {
        let marks = vec![mark(5, Target::Tag(7), false), mark(9, Target::All, true)];
        let body = MarksBatch::encode(60_000, &marks).unwrap();
        let batch = MarksBatch::decode(&body).unwrap();
        assert_eq!(batch.keep_ms, 60_000);
        assert_eq!(batch.marks.len(), 2);
        assert_eq!(
            (
                batch.marks[0].at_us,
                batch.marks[0].target,
                batch.marks[0].soft
            ),
            (5, Target::Tag(7), false)
        );
        assert_eq!(batch.marks[0].field(), [2, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(batch.marks[1].field(), [1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(batch.marks[1].sealed, marks[1]);
        let clamped = MarksBatch::decode(&MarksBatch::encode(0, &marks).unwrap()).unwrap();
        assert_eq!(clamped.keep_ms, MIN_KEEP_MS);
    }

    #[test]
    fn anything_else_is_refused() {
        let good = MarksBatch::encode(1_000, &[mark(5, Target::Tag(7), false)]).unwrap();
        for cut in 0..good.len() {
            assert!(MarksBatch::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(MarksBatch::decode(&longer).is_err());
        let two = PurgeRecord {
            at_us: 1,
            targets: vec![(Target::Tag(1), false), (Target::Tag(2), false)],
        };
        let mut sealed = vec![0; SEAL_HEADER_BYTES];
        sealed.extend_from_slice(&two.encode().unwrap());
        assert!(Mark::read(&sealed).is_err(), "two targets");
        assert_eq!(MarksBatch::encode(1, &[]), None);
        assert_eq!(MarksBatch::encode(1, &[sealed]), None);
        let mut other = good;
        other[0] = 2;
        assert_eq!(MarksBatch::decode(&other), Err(DecodeError::Version(2)));
    }

    #[test]
    fn a_full_batch_fits_its_limit() {
        let marks = vec![mark(u64::MAX, Target::Tag(u64::MAX), true); MAX_MARKS_PER_BATCH];
        let body = MarksBatch::encode(1, &marks).unwrap();
        assert!(body.len() <= MAX_MARKS_BODY_BYTES);
        assert_eq!(
            MarksBatch::decode(&body).unwrap().marks.len(),
            MAX_MARKS_PER_BATCH
        );
        let over = vec![mark(1, Target::All, false); MAX_MARKS_PER_BATCH + 1];
        assert_eq!(MarksBatch::encode(1, &over), None);
    }

    #[test]
    fn a_full_page_fits_and_pages_are_checked() {
        let page = MarksPage {
            generation: "f".repeat(crate::limits::MAX_GEN_BYTES),
            cursor: u64::MAX.to_string(),
            tip: format!("{}-{}", u64::MAX, u64::MAX),
            n: u64::MAX,
            entries: vec![
                PurgeEntry::new(format!("{}-{}", u64::MAX, u64::MAX), &[0xff; MARK_BYTES]);
                MARKS_PER_PAGE
            ],
        };
        let body = page.encode();
        assert!(body.len() <= MAX_MARKS_PAGE_BYTES, "{}", body.len());
        assert_eq!(MarksPage::decode(body.as_bytes()), Ok(page));
        for bad in [
            &br#"{"gen":"g","cursor":"x","tip":"0","n":0,"entries":[]}"#[..],
            br#"{"gen":"g","cursor":"0","tip":"$","n":0,"entries":[]}"#,
            br#"{"gen":"","cursor":"0","tip":"0","n":0,"entries":[]}"#,
            br#"{"gen":"g","cursor":"0","tip":"0","entries":[]}"#,
        ] {
            assert!(
                MarksPage::decode(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let added = MarksAdded {
            generation: "g1".into(),
            last: "17-0".into(),
            n: 3,
        };
        assert_eq!(added.encode(), r#"{"gen":"g1","last":"17-0","n":3}"#);
        assert_eq!(MarksAdded::decode(added.encode().as_bytes()), Ok(added));
    }
}
