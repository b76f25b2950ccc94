//! The fleet's purge log as this node reads it: each record (one node's purge: the targets and
//! the moment they were purged, on the purging node's clock, so every node marks the same instant
//! and an entry born before the purge is purged everywhere, whichever node stored it) opened with
//! the fleet key and dated no later than this node's clock allows. The record's format and the
//! log's answers are the wire contract's (`l2_proto::purge`, `l2_proto::purges`).

use crate::fleet::seal::FleetKey;
use l2_proto::marks::MarksPage;
use l2_proto::purges::{PurgeEntry, PurgesAnswer};

// The record's format and the checks of what goes back into a path are the wire contract's;
// named here too, where the rest of the filter (and fuzz/) looks for them.
pub use l2_proto::limits::{valid_cursor, valid_generation};
pub use l2_proto::marks;
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
    /// The sequence number of the page's last entry.
    pub last_n: Option<u64>,
}

/// One page of the purge snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPage {
    pub generation: String,
    /// Where the next page starts; `"0"`: read whole.
    pub cursor: String,
    /// Where the log stood when the first page was read, and its sequence number there.
    pub tip: String,
    pub n: u64,
    pub records: Vec<PurgeRecord>,
    /// A mark could not be read (unsigned, another key's): what it purged is unknown, but not
    /// when at the latest: the log took it at its entry id's time, and no honest mark is dated
    /// later than that plus the skew. `None`: every mark was read.
    pub unreadable_until_us: Option<u64>,
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
    /// record from the future would purge what is stored until then. Nor earlier than the log's
    /// own time for it (its entry id: Redis's clock when it was added) less the skew: an Envoy
    /// whose clock runs behind would otherwise date its purges early and purge too little.
    pub fn record(&self, sealed: &[u8], entry_id: &str) -> Option<PurgeRecord> {
        let mut record = PurgeRecord::decode(self.key.open_record(sealed)?).ok()?;
        let logged_us =
            entry_ms(entry_id).map_or(0, |ms| ms.saturating_mul(1000).saturating_sub(self.skew_us));
        record.at_us = record
            .at_us
            .max(logged_us)
            .min(self.now_us.saturating_add(self.skew_us));
        Some(record)
    }

    fn entry(&self, entry: &PurgeEntry) -> Option<PurgeRecord> {
        self.record(&entry.data().ok()?, &entry.id)
    }
}

/// The milliseconds part of a stream entry id (`MS-SEQ`).
fn entry_ms(id: &str) -> Option<u64> {
    id.split_once('-').map_or(id, |(ms, _)| ms).parse().ok()
}

/// Reads `GET /v1/purges`'s JSON answer. `None` when it is not one.
pub fn read_page(body: &[u8], reader: &Reader<'_>) -> Option<Page> {
    let answer = PurgesAnswer::decode(body).ok()?;
    let read: Vec<Option<PurgeRecord>> = answer.entries.iter().map(|e| reader.entry(e)).collect();
    let unreadable = read.iter().any(Option::is_none);
    Some(Page {
        entries: read.len(),
        last_n: answer.entries.last().and_then(|e| e.n),
        cursor: answer.last,
        generation: answer.generation,
        gap: answer.gap || unreadable,
        records: read.into_iter().flatten().collect(),
    })
}

/// Reads `GET /v1/marks`'s JSON answer. `None` when it is not one.
pub fn read_snapshot(body: &[u8], reader: &Reader<'_>) -> Option<SnapshotPage> {
    let page = MarksPage::decode(body).ok()?;
    let read: Vec<Option<PurgeRecord>> = page.entries.iter().map(|e| reader.entry(e)).collect();
    let latest = reader.now_us.saturating_add(reader.skew_us);
    let unreadable_until_us = page
        .entries
        .iter()
        .zip(&read)
        .filter(|(_, r)| r.is_none())
        .map(|(e, _)| {
            entry_ms(&e.id).map_or(latest, |ms| {
                ms.saturating_mul(1000)
                    .saturating_add(reader.skew_us)
                    .min(latest)
            })
        })
        .max();
    Some(SnapshotPage {
        unreadable_until_us,
        records: read.into_iter().flatten().collect(),
        generation: page.generation,
        cursor: page.cursor,
        tip: page.tip,
        n: page.n,
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
        assert_eq!(reader.record(&sealed, "").unwrap().at_us, 6_000_000);
        let past = PurgeRecord {
            at_us: 4_000_000,
            ..future
        };
        let sealed = key(1).seal_record(&past.encode().unwrap());
        assert_eq!(reader.record(&sealed, "").unwrap().at_us, 4_000_000);
        assert_eq!(reader.record(&sealed, "4500-0").unwrap().at_us, 4_000_000);
    }

    #[test]
    fn a_snapshot_mark_that_cannot_be_read_purged_nothing_after_the_log_took_it() {
        let reader = Reader {
            key: &key(1),
            now_us: 60_000_000,
            skew_us: 1_000_000,
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        let good = key(1).seal_record(&record().encode().unwrap());
        let other_key = key(2).seal_record(&record().encode().unwrap());
        let page = |entries: &[(&str, &[u8])]| {
            let entries: Vec<String> = entries
                .iter()
                .map(|(id, d)| format!(r#"{{"id":"{id}","data":"{}"}}"#, b64.encode(d)))
                .collect();
            format!(
                r#"{{"gen":"g","cursor":"0","tip":"9-0","n":2,"entries":[{}]}}"#,
                entries.join(",")
            )
        };
        let read = |body: String| read_snapshot(body.as_bytes(), &reader).unwrap();
        assert_eq!(read(page(&[("9-0", &good)])).unreadable_until_us, None);
        let rotated = read(page(&[("9-0", &good), ("5000-1", &other_key)]));
        assert_eq!(
            rotated.unreadable_until_us,
            Some(6_000_000),
            "its log time plus the skew"
        );
        assert_eq!(rotated.records.len(), 1);
        let undated = read(page(&[("x", &other_key)]));
        assert_eq!(
            undated.unreadable_until_us,
            Some(61_000_000),
            "now plus the skew"
        );
    }

    #[test]
    fn a_record_dated_before_the_log_took_it_is_dated_then_less_the_skew() {
        let reader = Reader {
            key: &key(1),
            now_us: 60_000_000,
            skew_us: 1_000_000,
        };
        // Written by an Envoy whose clock is 20 s behind; the log took it at 50 s.
        let slow = PurgeRecord {
            at_us: 30_000_000,
            targets: vec![(Target::Tag(3), false)],
        };
        let sealed = key(1).seal_record(&slow.encode().unwrap());
        assert_eq!(reader.record(&sealed, "50000-3").unwrap().at_us, 49_000_000);
        assert_eq!(
            reader.record(&sealed, "90000-0").unwrap().at_us,
            61_000_000,
            "a log time in the future is no later than now plus the skew"
        );
        assert_eq!(reader.record(&sealed, "junk").unwrap().at_us, 30_000_000);
    }
}
