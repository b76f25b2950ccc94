//! What a candidate that drops vary headers shares: the keys it merges (one entry for requests
//! that had several), and of those, the ones whose requests' last stored answers differed. An
//! answer that depended on a dropped header (a language, a caller's data) would be served to
//! requests that sent another value: the hit ratio alone does not say so.

use crate::fast_hash::FastMap;
use crate::whatif::ring::{Kind, Record};
use crate::whatif::simulate::{Group, Keying};

/// One group's merged keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Merged {
    /// Candidate keys that hold more than one of today's keys.
    pub keys: u64,
    /// Of those, the ones whose keys' last stored answers were not all the same.
    pub differing: u64,
}

/// The keys `keying` merges in `records`, by group (nothing when it keys as recorded).
pub fn merges(records: &[Record], keying: Keying) -> FastMap<Group, Merged> {
    let mut out: FastMap<Group, Merged> = FastMap::default();
    if keying == Keying::AsRecorded {
        return out;
    }
    let mut last: FastMap<u64, u32> = FastMap::default();
    for r in records
        .iter()
        .filter(|r| r.kind == Kind::Storable && r.answer != 0)
    {
        last.insert(r.hash, r.answer);
    }
    // Candidate key -> (its group, today's keys in it).
    let mut members: FastMap<u64, (Group, Vec<u64>)> = FastMap::default();
    let lookups = records.iter().filter(|r| r.kind.is_lookup());
    for r in lookups.filter(|r| r.variant.shape != 0) {
        let entry = members
            .entry(keying.of(r))
            .or_insert_with(|| ((r.entity, r.op), Vec::new()));
        entry.1.push(r.hash);
    }
    for (group, mut keys) in members.into_values() {
        keys.sort_unstable();
        keys.dedup();
        if keys.len() < 2 {
            continue;
        }
        let mut answers: Vec<u32> = keys.iter().filter_map(|k| last.get(k).copied()).collect();
        answers.sort_unstable();
        answers.dedup();
        let merged = out.entry(group).or_default();
        merged.keys += 1;
        merged.differing += u64::from(answers.len() > 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::variant::Variant;

    fn rec(hash: u64, lang: u32, kind: Kind, answer: u32) -> Record {
        Record {
            at_ms: 0,
            hash,
            op: 3,
            kind,
            why: 0,
            size: 10,
            lifetime_s: 10,
            entity: false,
            variant: Variant {
                // Keys 1-2 share a shape (one query, two languages), as do keys 3-4.
                shape: if hash <= 2 { 50 } else { 60 },
                vary: [lang, 0, 0, 0],
            },
            answer,
        }
    }

    #[test]
    fn merged_keys_are_counted_and_those_that_answered_differently_flagged() {
        let records = [
            rec(1, 1, Kind::Miss, 0),
            rec(1, 0, Kind::Storable, 111),
            rec(2, 2, Kind::Miss, 0),
            rec(2, 0, Kind::Storable, 222),
            rec(3, 1, Kind::Miss, 0),
            rec(3, 0, Kind::Storable, 333),
            rec(4, 2, Kind::Miss, 0),
            rec(4, 0, Kind::Storable, 333),
            rec(4, 2, Kind::Hit, 0),
        ];
        let dropped = merges(&records, Keying::Keeping(0));
        assert_eq!(
            dropped[&(false, 3)],
            Merged {
                keys: 2,
                differing: 1
            }
        );
        assert!(
            merges(&records, Keying::Keeping(1)).is_empty(),
            "kept: none merge"
        );
        assert!(merges(&records, Keying::AsRecorded).is_empty());
    }
}
