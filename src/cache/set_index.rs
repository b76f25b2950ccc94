//! One set's index record: which key each of the set's ways holds, how large its entry is and
//! until when it may be served (stale windows included). Small enough to read on every miss and
//! to rewrite under compare-and-swap on every store, so the ways themselves are never read to
//! decide where an entry goes.
//!
//! The record lives in shared data, where any worker (or a damaged VM) may have written it:
//! decoding checks everything, and a record that does not decode is treated as an empty set
//! (its ways are then overwritten one by one; a stale way is never served because every entry
//! carries its key's full digest).

/// Record layout version; a record of another version is a foreign set.
const VERSION: u8 = 3;
/// Bytes per way: fingerprint (8), entry size (4), keep-until (8), recorded frequency (1).
const WAY_BYTES: usize = 21;
/// Version, way count, admission decisions since the recorded frequencies were last halved.
const HEADER_BYTES: usize = 3;
/// Admission decisions taken in a set between two halvings of its recorded frequencies: a key
/// hot once does not keep its place on its old fame for ever, but ages as fast as newcomers
/// press on its set (a set nobody wants to enter has no reason to age).
pub const AGE_DECISIONS: u8 = 2 * 16;

/// One way's occupant. `fingerprint` 0 is an empty way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Way {
    pub fingerprint: u64,
    pub size: u32,
    /// After this instant the entry may not be served at all, not even stale: its way is free.
    pub keep_until_ms: u64,
    /// The most any worker had counted for it (each sees only its share of the traffic), as
    /// recorded when it was stored, when it was hit, and when its set was rewritten; halved every
    /// [`AGE_DECISIONS`] admission decisions in the set.
    pub frequency: u8,
}

impl Way {
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.fingerprint != 0 && self.keep_until_ms > now_ms
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetIndex {
    pub ways: Vec<Way>,
    /// Admission decisions taken since the recorded frequencies were last halved.
    pub decisions: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexError {
    /// Another version or another way count: written by another configuration.
    Foreign,
    Truncated,
}

/// Where a new entry goes in its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The key is already there (an older answer): replaced in place.
    Same { way: usize, old: Way },
    /// An empty way, or one whose entry may no longer be served (`old` says which).
    Free { way: usize, old: Way },
    /// Every way holds a live entry: the least valuable one is displaced.
    Displace { way: usize, victim: Way },
    /// Every way holds a live entry asked for at least as often as the new one (TinyLFU).
    Reject,
}

impl SetIndex {
    pub fn empty(ways: usize) -> Self {
        SetIndex {
            ways: vec![Way::default(); ways],
            decisions: 0,
        }
    }

    /// Reads a record of exactly `ways` ways.
    pub fn decode(bytes: &[u8], ways: usize) -> Result<Self, IndexError> {
        let [version, count, decisions, rest @ ..] = bytes else {
            return Err(IndexError::Truncated);
        };
        if *version != VERSION || usize::from(*count) != ways {
            return Err(IndexError::Foreign);
        }
        if rest.len() != ways * WAY_BYTES {
            return Err(IndexError::Truncated);
        }
        let ways = rest
            .chunks_exact(WAY_BYTES)
            .map(|w| Way {
                fingerprint: u64::from_le_bytes(array(&w[0..8])),
                size: u32::from_le_bytes(array(&w[8..12])),
                keep_until_ms: u64::from_le_bytes(array(&w[12..20])),
                frequency: w[20],
            })
            .collect();
        Ok(SetIndex {
            ways,
            decisions: *decisions,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.ways.len() * WAY_BYTES);
        out.push(VERSION);
        out.push(u8::try_from(self.ways.len()).unwrap_or(u8::MAX));
        out.push(self.decisions);
        for w in &self.ways {
            out.extend_from_slice(&w.fingerprint.to_le_bytes());
            out.extend_from_slice(&w.size.to_le_bytes());
            out.extend_from_slice(&w.keep_until_ms.to_le_bytes());
            out.push(w.frequency);
        }
        out
    }

    /// Counts one admission decision, halving every recorded frequency each
    /// [`AGE_DECISIONS`] of them.
    pub fn age(&mut self) {
        self.age_by(1);
    }

    /// Counts `decisions` admission decisions at once (a sample standing for them).
    pub fn age_by(&mut self, decisions: u8) {
        self.decisions = self.decisions.saturating_add(decisions);
        if self.decisions >= AGE_DECISIONS {
            self.decisions = 0;
            for way in &mut self.ways {
                way.frequency /= 2;
            }
        }
    }

    /// Raises the recorded frequency of the way holding `fingerprint` to `frequency`; `false`
    /// when the key is not in the set or its record is already as high.
    pub fn record(&mut self, fingerprint: u64, frequency: u8) -> bool {
        match self.ways.iter_mut().find(|w| w.fingerprint == fingerprint) {
            Some(way) if way.frequency < frequency => {
                way.frequency = frequency;
                true
            }
            _ => false,
        }
    }

    /// The way holding `fingerprint`, live or not.
    pub fn find(&self, fingerprint: u64) -> Option<usize> {
        self.ways.iter().position(|w| w.fingerprint == fingerprint)
    }

    /// Where an entry for `fingerprint`, asked for `frequency` times lately, goes: its own way,
    /// else a free one, else the live entry asked for least (`frequency_of` its fingerprint; the
    /// one that ends soonest among equals), if the new entry is asked for more often.
    pub fn place(
        &self,
        fingerprint: u64,
        frequency: u8,
        now_ms: u64,
        frequency_of: impl Fn(&Way) -> u8,
    ) -> Placement {
        if let Some(way) = self.find(fingerprint) {
            return Placement::Same {
                way,
                old: self.ways[way],
            };
        }
        if let Some(way) = self.ways.iter().position(|w| !w.is_live(now_ms)) {
            return Placement::Free {
                way,
                old: self.ways[way],
            };
        }
        let victim = self
            .ways
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (frequency_of(w), w.keep_until_ms));
        match victim {
            Some((way, victim)) if frequency > frequency_of(victim) => Placement::Displace {
                way,
                victim: *victim,
            },
            _ => Placement::Reject,
        }
    }

    /// The live way worth least, for room made elsewhere than in a new entry's own set.
    pub fn coldest(&self, now_ms: u64, frequency_of: impl Fn(&Way) -> u8) -> Option<(usize, u8)> {
        self.ways
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_live(now_ms))
            .map(|(i, w)| (i, frequency_of(w), w.keep_until_ms))
            .min_by_key(|&(_, f, until)| (f, until))
            .map(|(i, f, _)| (i, f))
    }

    /// Bytes of the entries held, live or not (an expired entry still occupies its way until
    /// something replaces it).
    pub fn bytes(&self) -> u64 {
        self.ways.iter().map(|w| u64::from(w.size)).sum()
    }
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    <[u8; N]>::try_from(bytes).unwrap_or([0; N])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn way(fp: u64, until: u64) -> Way {
        Way {
            fingerprint: fp,
            size: 100,
            keep_until_ms: until,
            frequency: 0,
        }
    }

    #[test]
    fn round_trips_and_rejects_other_shapes() {
        let mut set = SetIndex::empty(4);
        set.ways[2] = way(9, 1000);
        let bytes = set.encode();
        assert_eq!(SetIndex::decode(&bytes, 4), Ok(set));
        assert_eq!(SetIndex::decode(&bytes, 8), Err(IndexError::Foreign));
        assert_eq!(
            SetIndex::decode(&bytes[..bytes.len() - 1], 4),
            Err(IndexError::Truncated)
        );
        assert_eq!(SetIndex::decode(b"", 4), Err(IndexError::Truncated));
        let mut other = bytes.clone();
        other[0] = 9;
        assert_eq!(SetIndex::decode(&other, 4), Err(IndexError::Foreign));
    }

    #[test]
    fn places_same_then_free_then_the_coldest_if_colder() {
        let mut set = SetIndex::empty(2);
        let freq = |w: &Way| (w.fingerprint % 10) as u8;
        assert!(matches!(
            set.place(11, 1, 0, freq),
            Placement::Free { way: 0, .. }
        ));
        set.ways[0] = way(11, 100);
        assert!(matches!(
            set.place(11, 1, 0, freq),
            Placement::Same { way: 0, .. }
        ));
        set.ways[1] = way(13, 100);
        // Full: 11 (frequency 1) is the victim, for a key asked more often than that.
        assert_eq!(
            set.place(25, 5, 0, freq),
            Placement::Displace {
                way: 0,
                victim: way(11, 100)
            }
        );
        assert_eq!(set.place(25, 1, 0, freq), Placement::Reject);
        // Once 11 may no longer be served, its way is free for anyone.
        assert!(matches!(
            set.place(25, 0, 100, freq),
            Placement::Free { way: 0, .. }
        ));
    }

    #[test]
    fn records_only_raise_and_age_by_half_every_so_many_decisions() {
        let mut set = SetIndex::empty(2);
        set.ways[0] = Way {
            frequency: 8,
            ..way(5, 100)
        };
        assert!(!set.record(5, 7));
        assert!(!set.record(6, 9), "not in the set");
        assert!(set.record(5, 12));
        for _ in 1..AGE_DECISIONS {
            set.age();
        }
        assert_eq!(set.ways[0].frequency, 12);
        set.age();
        assert_eq!((set.ways[0].frequency, set.decisions), (6, 0));
        assert_eq!(SetIndex::decode(&set.encode(), 2), Ok(set));
    }
}
