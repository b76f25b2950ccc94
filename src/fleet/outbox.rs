//! Purges this Envoy owes the fleet's purge log, kept in shared data until the log has them. Any
//! worker adds to it (the purge API, mutations); the Envoy's one feed follower sends the oldest
//! records, as many as one call carries, and removes them only when the L2 service says the log
//! holds them. A purge is never dropped, and rarely widened: when the outbox is full, what is
//! pending merges into one purge of the union of its targets, dated at the *latest* pending
//! instant (a purge removes what was born before its instant, so a later instant purges at least
//! as much for every target). Only a union over [`MAX_MERGED_TARGETS`] becomes a purge of
//! everything, also at the latest instant.

use crate::effects::store::{update, SharedStore, StoreError};
use crate::fleet::purge_log::marks::MAX_MARKS_PER_BATCH;
use crate::fleet::purge_log::{PurgeRecord, MAX_TARGETS};
use crate::invalidate::marks::Target;

pub const OUTBOX_KEY: &str = "graphql-cache/v1/purge-outbox";
/// The most targets one owed record holds: what one call to the log carries (each target is a
/// mark), so that the oldest record always fits a call.
pub const RECORD_TARGETS: usize = if MAX_TARGETS < MAX_MARKS_PER_BATCH {
    MAX_TARGETS
} else {
    MAX_MARKS_PER_BATCH
};
/// Records pending at most; one more merges them all.
pub const MAX_PENDING: usize = 64;
/// Distinct targets a merge keeps; past it, the merge is a purge of everything.
pub const MAX_MERGED_TARGETS: usize = 16_384;
/// Bytes of records pending at most (a record is at most 64 KiB).
pub const MAX_PENDING_BYTES: usize = 512 * 1024;
const MAGIC: &[u8; 4] = b"GQPO";
const VERSION: u8 = 3;

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
    /// The call on its way to the log, if any: whichever worker took the purge sends at once
    /// (no waiting for one follower's timer), and only one call is out at a time.
    pub sending: Sending,
    pub pending: Vec<Pending>,
}

/// Who sends the records up to `through` to the log, until `until_ms` (then anyone may again:
/// a worker whose call was lost). `owner` 0: nobody.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sending {
    pub owner: u64,
    pub through: u64,
    pub until_ms: u64,
}

impl Sending {
    fn active(&self, now_ms: u64) -> bool {
        self.owner != 0 && self.until_ms > now_ms
    }

    /// The sending of an encoded outbox, read from its header alone (every worker looks on every
    /// flush; decoding every record to see that another worker sends would cost each miss).
    fn peek(bytes: &[u8]) -> Option<Sending> {
        let header = bytes.strip_prefix(MAGIC)?.strip_prefix(&[VERSION])?;
        let u64_at = |at: usize| Some(u64::from_le_bytes(header.get(at..at + 8)?.try_into().ok()?));
        Some(Sending {
            owner: u64_at(8)?,
            through: u64_at(16)?,
            until_ms: u64_at(24)?,
        })
    }
}

impl Outbox {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        for n in [
            self.sending.owner,
            self.sending.through,
            self.sending.until_ms,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
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
        let sending = Sending {
            owner: take_u64(&mut rest)?,
            through: take_u64(&mut rest)?,
            until_ms: take_u64(&mut rest)?,
        };
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
        Ok(Outbox {
            next_seq,
            sending,
            pending,
        })
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

    /// Everything pending but the records on their way to the log, as few records as its
    /// targets take, each target once, all dated at `latest_us` (at least every pending instant);
    /// past [`MAX_MERGED_TARGETS`], one purge of everything. `true` when it came to that.
    fn merge(&mut self, latest_us: u64) -> bool {
        let through = if self.sending.owner != 0 {
            self.sending.through
        } else {
            0
        };
        let at = self
            .pending
            .iter()
            .position(|p| self.sending.owner == 0 || p.seq > through)
            .unwrap_or(self.pending.len());
        let merged: Vec<Pending> = self.pending.drain(at..).collect();
        let first = merged
            .iter()
            .map(|p| p.first)
            .min()
            .unwrap_or(self.next_seq);
        let mut targets: Vec<(Target, bool)> =
            merged.into_iter().flat_map(|p| p.record.targets).collect();
        targets.sort_unstable_by_key(|&(t, soft)| (target_order(t), soft));
        targets.dedup();
        let everything = targets.len() > MAX_MERGED_TARGETS;
        if everything {
            targets = vec![(Target::All, false)];
        }
        for chunk in targets.chunks(RECORD_TARGETS) {
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
        for chunk in targets.chunks(RECORD_TARGETS) {
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

/// Takes the sending of the oldest records (as many as `max_targets` targets) for worker `me`,
/// unless another worker's call is on its way: those records and the last one's place.
pub fn claim(
    store: &impl SharedStore,
    me: u64,
    now_ms: u64,
    lease_ms: u64,
    max_targets: usize,
) -> Result<Option<(Vec<PurgeRecord>, u64)>, StoreError> {
    let mut claimed = None;
    update(store, OUTBOX_KEY, |old| {
        claimed = None;
        let sending = Sending::peek(old?)?;
        if sending.active(now_ms) && sending.owner != me {
            return None;
        }
        let mut outbox = Outbox::decode(old).ok()?;
        if outbox.sending.active(now_ms) && outbox.sending.owner != me {
            return None;
        }
        let (records, last) = outbox.oldest(max_targets);
        let last = last?;
        claimed = Some((records.into_iter().cloned().collect(), last));
        outbox.sending = Sending {
            owner: me,
            through: last,
            until_ms: now_ms.saturating_add(lease_ms),
        };
        Some(outbox.encode())
    })?;
    Ok(claimed)
}

/// Worker `me`'s call failed: anyone may send again.
pub fn release(store: &impl SharedStore, me: u64) -> Result<(), StoreError> {
    update(store, OUTBOX_KEY, |old| {
        let mut outbox = Outbox::decode(old).ok()?;
        (outbox.sending.owner == me).then(|| {
            outbox.sending = Sending::default();
            outbox.encode()
        })
    })
    .map(|_| ())
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

/// The log holds every record up to `seq`, which worker `me` sent: they are no longer owed, and
/// anyone may send the next.
pub fn acknowledge(store: &impl SharedStore, me: u64, seq: u64) -> Result<(), StoreError> {
    update(store, OUTBOX_KEY, |old| {
        let mut outbox = Outbox::decode(old).ok()?;
        let before = (outbox.pending.len(), outbox.sending);
        outbox.pending.retain(|p| p.seq > seq);
        if outbox.sending.owner == me {
            outbox.sending = Sending::default();
        }
        ((outbox.pending.len(), outbox.sending) != before).then(|| outbox.encode())
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
        acknowledge(&store, 1, oldest.seq).unwrap();
        acknowledge(&store, 1, oldest.seq).unwrap();
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
        acknowledge(&store, 1, outbox.pending[1].seq).unwrap();
        assert_eq!(pending(&store), 3, "acknowledged through its place");
    }

    #[test]
    fn every_owed_record_fits_one_call_to_the_log() {
        let store = MapStore::default();
        let many: Vec<(Target, bool)> = (0..3 * MAX_MARKS_PER_BATCH as u64 + 5)
            .map(|n| (Target::Tag(n), false))
            .collect();
        push(&store, 1, &many).unwrap();
        let outbox = read(&store);
        assert_eq!(outbox.pending.len(), 4);
        assert!(outbox
            .pending
            .iter()
            .all(|p| p.record.targets.len() <= MAX_MARKS_PER_BATCH));
        let (sent, _) = outbox.oldest(MAX_MARKS_PER_BATCH);
        assert_eq!(sent.len(), 1, "one full record a call");
    }

    #[test]
    fn one_worker_sends_at_a_time_and_a_merge_leaves_what_it_sends_alone() {
        let store = MapStore::default();
        push(&store, 10, &tag(1)).unwrap();
        push(&store, 20, &tag(2)).unwrap();
        let (sent, last) = claim(&store, 7, 1_000, 500, 1).unwrap().unwrap();
        assert_eq!(
            (sent[0].targets.clone(), last),
            (tag(1), 0),
            "the oldest, one target"
        );
        assert_eq!(
            claim(&store, 8, 1_100, 500, 10).unwrap(),
            None,
            "7's call is out"
        );
        // Past what the outbox holds: the rest merges, the record on its way stays as sent.
        for n in 0..MAX_PENDING as u64 - 1 {
            push(&store, 30 + n, &tag(100 + n)).unwrap();
        }
        let outbox = read(&store);
        assert_eq!(outbox.pending[0].seq, 0, "still there, still place 0");
        assert_eq!(outbox.pending[0].record.targets, tag(1));
        assert_eq!(outbox.pending.len(), 2, "and everything else in one record");
        // Lost: another worker may send once 7's lease has run out.
        assert!(claim(&store, 8, 1_600, 500, 10).unwrap().is_some());
        release(&store, 7).unwrap();
        assert_eq!(read(&store).sending.owner, 8, "not 7's to release");
        acknowledge(&store, 8, outbox.pending[1].seq).unwrap();
        assert!(read(&store).pending.is_empty());
        assert_eq!(
            read(&store).sending,
            Sending::default(),
            "anyone may send next"
        );
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
        acknowledge(&store, 1, outbox.pending[0].seq).unwrap();
        assert_eq!(owed_from(&store), outbox.pending[0].seq + 1);
    }

    #[test]
    fn only_a_union_past_the_budget_is_a_purge_of_everything() {
        let store = MapStore::default();
        let big: Vec<(Target, bool)> = (0..RECORD_TARGETS as u64)
            .map(|n| (Target::Tag(n + 1), true))
            .collect();
        let mut folded = false;
        for i in 0..=(MAX_MERGED_TARGETS / RECORD_TARGETS + 1) as u64 {
            let shifted: Vec<_> = big
                .iter()
                .map(|&(t, s)| match t {
                    Target::Tag(h) => (Target::Tag(h + i * RECORD_TARGETS as u64), s),
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
