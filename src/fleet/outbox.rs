//! Purges this Envoy owes the fleet's purge log, kept in shared data until the log has them. Any
//! worker adds to it (the purge API, mutations); the Envoy's one feed follower sends the oldest
//! records, as many as one call carries, and removes them only when the L2 service says the log
//! holds them. A purge is never dropped, and rarely widened: when the outbox is full, what is
//! pending merges into one purge of the union of its targets, dated at the *latest* pending
//! instant (a purge removes what was born before its instant, so a later instant purges at least
//! as much for every target). Only a union over [`MAX_MERGED_TARGETS`] becomes a purge of
//! everything, also at the latest instant.

use crate::effects::store::{update, SharedStore, StoreError};
use crate::fleet::purge_log::{PurgeRecord, MAX_TARGETS};
use crate::invalidate::marks::Target;

pub const OUTBOX_KEY: &str = "graphql-cache/v1/purge-outbox";
/// Records pending at most; one more merges them all.
pub const MAX_PENDING: usize = 64;
/// Distinct targets a merge keeps; past it, the merge is a purge of everything.
pub const MAX_MERGED_TARGETS: usize = 16_384;
/// Bytes of records pending at most (a record is at most 64 KiB).
pub const MAX_PENDING_BYTES: usize = 512 * 1024;
const MAGIC: &[u8; 4] = b"GQPO";
const VERSION: u8 = 2;

/// One purge record waiting for the log, and its place in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub seq: u64,
    /// The first place whose purge it holds: a merge's record holds all the ones it merged, so
    /// whoever waits for place `n` to reach the log waits until no record holds one at or before
    /// it.
    pub first: u64,
    pub record: PurgeRecord,
}

/// The outbox as shared data holds it (public for the fuzz target).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbox {
    pub next_seq: u64,
    pub pending: Vec<Pending>,
}

impl Outbox {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        for p in &self.pending {
            let record = p.record.encode().unwrap_or_default();
            out.extend_from_slice(&p.seq.to_le_bytes());
            out.extend_from_slice(&p.first.to_le_bytes());
            out.extend_from_slice(&(record.len() as u32).to_le_bytes());
            out.extend_from_slice(&record);
        }
        out
    }

    /// An empty or unreadable value is an empty outbox; an unreadable one says so (`Err`), so
    /// that what it held is purged as everything rather than forgotten.
    #[allow(clippy::result_unit_err)]
    pub fn decode(bytes: Option<&[u8]>) -> Result<Outbox, ()> {
        let Some(bytes) = bytes.filter(|b| !b.is_empty()) else {
            return Ok(Outbox::default());
        };
        let rest = bytes.strip_prefix(MAGIC).ok_or(())?;
        let (&version, mut rest) = rest.split_first().ok_or(())?;
        if version != VERSION {
            return Err(());
        }
        let next_seq = take_u64(&mut rest)?;
        let mut pending = Vec::new();
        while !rest.is_empty() {
            let seq = take_u64(&mut rest)?;
            let first = take_u64(&mut rest)?;
            let len = take_u32(&mut rest)? as usize;
            let (record, tail) = (rest.get(..len).ok_or(())?, &rest[len..]);
            rest = tail;
            let record = PurgeRecord::decode(record).map_err(|_| ())?;
            pending.push(Pending { seq, first, record });
        }
        Ok(Outbox { next_seq, pending })
    }

    fn bytes(&self) -> usize {
        self.pending
            .iter()
            .map(|p| 20 + 11 + 9 * p.record.targets.len())
            .sum()
    }

    fn push(&mut self, record: PurgeRecord) {
        self.push_holding(record, self.next_seq);
    }

    /// Adds `record`, holding the purges of places from `first` on.
    fn push_holding(&mut self, record: PurgeRecord, first: u64) {
        self.pending.push(Pending {
            seq: self.next_seq,
            first: first.min(self.next_seq),
            record,
        });
        self.next_seq = self.next_seq.wrapping_add(1);
    }

    /// The first place still owed: every place before it is in the log.
    pub fn owed_from(&self) -> u64 {
        let owed = self.pending.iter().map(|p| p.first).min();
        owed.unwrap_or(self.next_seq)
    }

    /// Everything pending as few records as its targets take, each target once, all dated at
    /// `latest_us` (at least every pending instant); past [`MAX_MERGED_TARGETS`], one purge of
    /// everything. `true` when it came to that.
    fn merge(&mut self, latest_us: u64) -> bool {
        let first = self
            .pending
            .iter()
            .map(|p| p.first)
            .min()
            .unwrap_or(self.next_seq);
        let mut targets: Vec<(Target, bool)> = self
            .pending
            .drain(..)
            .flat_map(|p| p.record.targets)
            .collect();
        targets.sort_unstable_by_key(|&(t, soft)| (target_order(t), soft));
        targets.dedup();
        let everything = targets.len() > MAX_MERGED_TARGETS;
        if everything {
            targets = vec![(Target::All, false)];
        }
        for chunk in targets.chunks(MAX_TARGETS) {
            let record = PurgeRecord {
                at_us: latest_us,
                targets: chunk.to_vec(),
            };
            self.push_holding(record, first);
        }
        everything
    }

    /// The oldest records, in order, while their targets fit `max_targets` (at least one
    /// record), and the last one's place.
    pub fn oldest(&self, max_targets: usize) -> (Vec<&PurgeRecord>, Option<u64>) {
        let mut taken = Vec::new();
        let mut count = 0;
        let mut last = None;
        for p in &self.pending {
            count += p.record.targets.len();
            if !taken.is_empty() && count > max_targets {
                break;
            }
            taken.push(&p.record);
            last = Some(p.seq);
        }
        (taken, last)
    }
}

/// A total order on targets, for de-duplicating them.
fn target_order(t: Target) -> (u8, u64) {
    match t {
        Target::All => (0, 0),
        Target::Tag(h) => (1, h),
    }
}

fn take_u64(rest: &mut &[u8]) -> Result<u64, ()> {
    let (head, tail) = (rest.get(..8).ok_or(())?, &rest[8..]);
    *rest = tail;
    Ok(u64::from_le_bytes(head.try_into().map_err(|_| ())?))
}

fn take_u32(rest: &mut &[u8]) -> Result<u32, ()> {
    let (head, tail) = (rest.get(..4).ok_or(())?, &rest[4..]);
    *rest = tail;
    Ok(u32::from_le_bytes(head.try_into().map_err(|_| ())?))
}

/// What [`push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// The purge's place: it is in the log once [`owed_from`] is past it.
    pub place: u64,
    /// Records pending now.
    pub pending: usize,
    /// The outbox was full and what it held was merged into fewer records.
    pub merged: bool,
    /// The merge, or an unreadable outbox, made it a purge of everything.
    pub folded: bool,
}

/// Adds a purge made at `at_us` to the outbox.
pub fn push(
    store: &impl SharedStore,
    at_us: u64,
    targets: &[(Target, bool)],
) -> Result<Pushed, StoreError> {
    let mut result = Pushed {
        place: 0,
        pending: 0,
        merged: false,
        folded: false,
    };
    update(store, OUTBOX_KEY, |old| {
        let (mut outbox, readable) = match Outbox::decode(old) {
            Ok(o) => (o, true),
            Err(()) => (Outbox::default(), false),
        };
        let latest = outbox
            .pending
            .iter()
            .map(|p| p.record.at_us)
            .fold(at_us, u64::max);
        if !readable {
            // It held purges of unknown targets, all made by now: everything, now.
            outbox.push(PurgeRecord {
                at_us,
                targets: vec![(Target::All, false)],
            });
        }
        for chunk in targets.chunks(MAX_TARGETS) {
            outbox.push(PurgeRecord {
                at_us,
                targets: chunk.to_vec(),
            });
        }
        let place = outbox.next_seq.saturating_sub(1);
        let full = outbox.pending.len() > MAX_PENDING || outbox.bytes() > MAX_PENDING_BYTES;
        let everything = full && outbox.merge(latest);
        result = Pushed {
            place,
            pending: outbox.pending.len(),
            merged: full,
            folded: everything || !readable,
        };
        Some(outbox.encode())
    })?;
    Ok(result)
}

/// The outbox as it is now (an unreadable one is empty: `push` turns it into a purge of
/// everything).
pub fn read(store: &impl SharedStore) -> Outbox {
    Outbox::decode(store.get(OUTBOX_KEY).as_deref()).unwrap_or_default()
}

/// The first place still owed to the log (see [`Pushed::place`]).
pub fn owed_from(store: &impl SharedStore) -> u64 {
    read(store).owed_from()
}

/// How many purges are owed to the log.
pub fn pending(store: &impl SharedStore) -> usize {
    Outbox::decode(store.get(OUTBOX_KEY).as_deref()).map_or(0, |o| o.pending.len())
}

/// The log holds every record up to `seq`: they are no longer owed. (Records merged since they
/// were sent have new places after `seq`, and are sent again: more, never less.)
pub fn acknowledge(store: &impl SharedStore, seq: u64) -> Result<(), StoreError> {
    update(store, OUTBOX_KEY, |old| {
        let mut outbox = Outbox::decode(old).ok()?;
        let before = outbox.pending.len();
        outbox.pending.retain(|p| p.seq > seq);
        (outbox.pending.len() != before).then(|| outbox.encode())
    })
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    fn tag(n: u64) -> Vec<(Target, bool)> {
        vec![(Target::Tag(n), false)]
    }

    fn first(store: &MapStore) -> Pending {
        read(store).pending.into_iter().next().unwrap()
    }

    #[test]
    fn purges_wait_in_order_until_the_log_has_them() {
        let store = MapStore::default();
        assert!(read(&store).pending.is_empty());
        push(&store, 10, &tag(1)).unwrap();
        let second = push(&store, 20, &tag(2)).unwrap();
        assert_eq!(
            second,
            Pushed {
                place: 1,
                pending: 2,
                merged: false,
                folded: false
            }
        );
        assert_eq!(owed_from(&store), 0, "place 0 is owed");
        let oldest = first(&store);
        assert_eq!((oldest.record.at_us, oldest.record.targets), (10, tag(1)));
        acknowledge(&store, oldest.seq).unwrap();
        acknowledge(&store, oldest.seq).unwrap();
        assert_eq!(owed_from(&store), 1, "place 0 is in the log");
        assert_eq!(first(&store).record.at_us, 20);
        assert_eq!(pending(&store), 1);
    }

    #[test]
    fn a_batch_takes_the_oldest_records_that_fit_and_their_last_place() {
        let store = MapStore::default();
        for n in 0..5 {
            push(
                &store,
                n,
                &[(Target::Tag(n), false), (Target::Tag(n + 100), true)],
            )
            .unwrap();
        }
        let outbox = read(&store);
        let (records, last) = outbox.oldest(5);
        assert_eq!(records.len(), 2, "2 records of 2 targets fit in 5");
        assert_eq!(last, Some(outbox.pending[1].seq));
        let (one, _) = outbox.oldest(1);
        assert_eq!(
            one.len(),
            1,
            "a record larger than the batch still goes, alone"
        );
        acknowledge(&store, outbox.pending[1].seq).unwrap();
        assert_eq!(pending(&store), 3, "acknowledged through its place");
    }

    #[test]
    fn a_full_outbox_merges_its_targets_at_the_latest_instant() {
        let store = MapStore::default();
        // The reproduction: an early purge, then the purge that matters, then many more.
        push(&store, 5, &tag(1)).unwrap();
        push(&store, 2_000, &tag(42)).unwrap();
        for n in 0..MAX_PENDING as u64 - 1 {
            let p = push(&store, 1_000 + n, &tag(n % 8)).unwrap();
            assert!(!p.folded);
        }
        let outbox = read(&store);
        assert_eq!(outbox.pending.len(), 1, "merged into one record");
        let merged = &outbox.pending[0].record;
        assert_eq!(
            merged.at_us, 2_000,
            "the latest owed instant, never an earlier one"
        );
        assert!(merged.targets.contains(&(Target::Tag(42), false)));
        assert!(!merged.targets.contains(&(Target::All, false)));
        assert_eq!(merged.targets.len(), 9, "each target once: 0..8 and 42");
        assert_eq!(outbox.pending[0].first, 0, "it holds every place merged");
        assert_eq!(outbox.owed_from(), 0);
        acknowledge(&store, outbox.pending[0].seq).unwrap();
        assert_eq!(owed_from(&store), outbox.pending[0].seq + 1);
    }

    #[test]
    fn only_a_union_past_the_budget_is_a_purge_of_everything() {
        let store = MapStore::default();
        let big: Vec<(Target, bool)> = (0..MAX_TARGETS as u64)
            .map(|n| (Target::Tag(n + 1), true))
            .collect();
        let mut folded = false;
        for i in 0..=(MAX_MERGED_TARGETS / MAX_TARGETS + 1) as u64 {
            let shifted: Vec<_> = big
                .iter()
                .map(|&(t, s)| match t {
                    Target::Tag(h) => (Target::Tag(h + i * MAX_TARGETS as u64), s),
                    Target::All => (t, s),
                })
                .collect();
            for _ in 0..MAX_PENDING / 4 {
                folded |= push(&store, 7_000 + i, &shifted).unwrap().folded;
                if folded {
                    break;
                }
            }
            if folded {
                break;
            }
        }
        assert!(folded, "past the budget");
        let all = first(&store);
        assert_eq!(all.record.targets, vec![(Target::All, false)]);
        assert!(all.record.at_us >= 7_000, "at the latest instant");
        assert!(pending(&store) <= MAX_PENDING);
        assert!(store.get(OUTBOX_KEY).unwrap().len() <= MAX_PENDING_BYTES + 64 * 1024);
    }

    #[test]
    fn an_unreadable_outbox_is_folded_not_forgotten() {
        let store = MapStore::default();
        store.set(OUTBOX_KEY, b"GQPO\x09junk").unwrap();
        assert!(read(&store).pending.is_empty());
        let pushed = push(&store, 42, &tag(1)).unwrap();
        assert!(pushed.folded);
        let records: Vec<_> = read(&store).pending.into_iter().map(|p| p.record).collect();
        assert_eq!(records[0].targets, vec![(Target::All, false)]);
        assert_eq!(records[0].at_us, 42);
        assert_eq!(records[1].targets, tag(1));
    }
}
