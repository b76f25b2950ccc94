//! The fleet's purge log as this node reads it: each record (one node's purge: the targets and
//! the moment they were purged, on the purging node's clock, so every node marks the same instant
//! and an entry born before the purge is purged everywhere, whichever node stored it) opened with
//! the fleet key and dated no later than this node's clock allows. The record's format and the
//! log's answers are the wire contract's (`l2_proto::purge`, `l2_proto::purges`).

use crate::fleet::seal::FleetKey;
use l2_proto::purges::PurgesAnswer;

// The record's format and the checks of what goes back into a path are the wire contract's;
// named here too, where the rest of the filter (and fuzz/) looks for them.
pub use l2_proto::limits::{valid_cursor, valid_generation};
pub use l2_proto::purge::{records, PurgeRecord, MAX_TARGETS};

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
        let mut record = PurgeRecord::decode(self.key.open_record(sealed)?).ok()?;
        record.at_us = record.at_us.min(self.now_us.saturating_add(self.skew_us));
        Some(record)
    }
}

/// Reads `GET /v1/purges`'s JSON answer. `None` when it is not one.
pub fn read_page(body: &[u8], reader: &Reader<'_>) -> Option<Page> {
    let answer = PurgesAnswer::decode(body).ok()?;
    let read: Vec<Option<PurgeRecord>> = answer
        .entries
        .iter()
        .map(|e| e.data().ok().and_then(|b| reader.record(&b)))
        .collect();
    let unreadable = read.iter().any(Option::is_none);
    Some(Page {
        entries: read.len(),
        cursor: answer.last,
        generation: answer.generation,
        gap: answer.gap || unreadable,
        records: read.into_iter().flatten().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invalidate::marks::Target;
    use base64::Engine;

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
