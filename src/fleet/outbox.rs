//! Purges this Envoy owes the fleet's purge log, kept in shared data until the log has them. Any
//! worker adds to it (the purge API, mutations); the Envoy's one feed follower sends the oldest
//! and removes it only when the L2 service says the log holds it. A purge is never dropped: when
//! the outbox is full, everything pending folds into one purge of everything at the earliest
//! pending instant (more than was asked, never less).

use crate::effects::store::{update, SharedStore, StoreError};
use crate::fleet::purge_log::{PurgeRecord, MAX_TARGETS};
use crate::invalidate::marks::Target;

pub const OUTBOX_KEY: &str = "graphql-cache/v1/purge-outbox";
/// Records pending at most; one more folds them all into one.
pub const MAX_PENDING: usize = 64;
/// Bytes of records pending at most (a record is at most 64 KiB).
pub const MAX_PENDING_BYTES: usize = 512 * 1024;
const MAGIC: &[u8; 4] = b"GQPO";
const VERSION: u8 = 1;

/// One purge record waiting for the log, and its place in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub seq: u64,
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
            let len = take_u32(&mut rest)? as usize;
            let (record, tail) = (rest.get(..len).ok_or(())?, &rest[len..]);
            rest = tail;
            let record = PurgeRecord::decode(record).map_err(|_| ())?;
            pending.push(Pending { seq, record });
        }
        Ok(Outbox { next_seq, pending })
    }

    fn bytes(&self) -> usize {
        self.pending
            .iter()
            .map(|p| 12 + 11 + 9 * p.record.targets.len())
            .sum()
    }

    fn push(&mut self, record: PurgeRecord) {
        self.pending.push(Pending {
            seq: self.next_seq,
            record,
        });
        self.next_seq = self.next_seq.wrapping_add(1);
    }

    /// Everything pending as one purge of everything, at the earliest pending instant.
    fn fold(&mut self, earliest_us: u64) {
        self.pending.clear();
        self.push(PurgeRecord {
            at_us: earliest_us,
            targets: vec![(Target::All, false)],
        });
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
    /// Records pending now.
    pub pending: usize,
    /// The outbox was full (or unreadable) and was folded into one purge of everything.
    pub folded: bool,
}

/// Adds a purge made at `at_us` to the outbox.
pub fn push(
    store: &impl SharedStore,
    at_us: u64,
    targets: &[(Target, bool)],
) -> Result<Pushed, StoreError> {
    let mut result = Pushed {
        pending: 0,
        folded: false,
    };
    update(store, OUTBOX_KEY, |old| {
        let (mut outbox, readable) = match Outbox::decode(old) {
            Ok(o) => (o, true),
            Err(()) => (Outbox::default(), false),
        };
        let earliest = outbox
            .pending
            .iter()
            .map(|p| p.record.at_us)
            .fold(at_us, u64::min);
        for chunk in targets.chunks(MAX_TARGETS) {
            outbox.push(PurgeRecord {
                at_us,
                targets: chunk.to_vec(),
            });
        }
        let full =
            outbox.pending.len() > MAX_PENDING || outbox.bytes() > MAX_PENDING_BYTES || !readable;
        if full {
            // An unreadable outbox held purges of unknown time: everything up to now.
            outbox.fold(if readable { earliest } else { at_us });
        }
        result = Pushed {
            pending: outbox.pending.len(),
            folded: full,
        };
        Some(outbox.encode())
    })?;
    Ok(result)
}

/// The oldest purge still owed to the log.
pub fn oldest(store: &impl SharedStore) -> Option<Pending> {
    let bytes = store.get(OUTBOX_KEY)?;
    match Outbox::decode(Some(&bytes)) {
        Ok(outbox) => outbox.pending.into_iter().next(),
        // Sent as everything, now: `push` folds an unreadable outbox the same way.
        Err(()) => None,
    }
}

/// How many purges are owed to the log.
pub fn pending(store: &impl SharedStore) -> usize {
    Outbox::decode(store.get(OUTBOX_KEY).as_deref()).map_or(0, |o| o.pending.len())
}

/// The log holds record `seq`: it is no longer owed.
pub fn acknowledge(store: &impl SharedStore, seq: u64) -> Result<(), StoreError> {
    update(store, OUTBOX_KEY, |old| {
        let mut outbox = Outbox::decode(old).ok()?;
        let before = outbox.pending.len();
        outbox.pending.retain(|p| p.seq != seq);
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

    #[test]
    fn purges_wait_in_order_until_the_log_has_them() {
        let store = MapStore::default();
        assert_eq!(oldest(&store), None);
        push(&store, 10, &tag(1)).unwrap();
        let second = push(&store, 20, &tag(2)).unwrap();
        assert_eq!(
            second,
            Pushed {
                pending: 2,
                folded: false
            }
        );
        let first = oldest(&store).unwrap();
        assert_eq!((first.record.at_us, first.record.targets), (10, tag(1)));
        acknowledge(&store, first.seq).unwrap();
        acknowledge(&store, first.seq).unwrap();
        assert_eq!(oldest(&store).unwrap().record.at_us, 20);
        assert_eq!(pending(&store), 1);
    }

    #[test]
    fn a_full_outbox_folds_into_one_purge_of_everything_at_the_earliest_instant() {
        let store = MapStore::default();
        for n in 0..MAX_PENDING as u64 {
            assert!(!push(&store, 1_000 + n, &tag(n)).unwrap().folded);
        }
        let over = push(&store, 5, &tag(99)).unwrap();
        assert_eq!(
            over,
            Pushed {
                pending: 1,
                folded: true
            }
        );
        let all = oldest(&store).unwrap();
        assert_eq!(all.record.targets, vec![(Target::All, false)]);
        assert_eq!(all.record.at_us, 5, "the earliest pending instant");
        let big: Vec<(Target, bool)> = (0..3 * MAX_TARGETS as u64)
            .map(|n| (Target::Tag(n + 1), true))
            .collect();
        for _ in 0..30 {
            push(&store, 7_000, &big).unwrap();
        }
        assert!(pending(&store) <= MAX_PENDING);
        assert!(store.get(OUTBOX_KEY).unwrap().len() <= MAX_PENDING_BYTES + 64 * 1024);
    }

    #[test]
    fn an_unreadable_outbox_is_folded_not_forgotten() {
        let store = MapStore::default();
        store.set(OUTBOX_KEY, b"GQPO\x09junk").unwrap();
        assert_eq!(oldest(&store), None);
        let pushed = push(&store, 42, &tag(1)).unwrap();
        assert!(pushed.folded);
        assert_eq!(
            oldest(&store).unwrap().record.targets,
            vec![(Target::All, false)]
        );
    }
}
