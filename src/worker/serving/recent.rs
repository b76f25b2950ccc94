//! What this worker keeps of its recent traffic for the what-if route (`whatif::ring`): a record
//! per lookup (hit, miss, purged, coalesced) and per origin answer (storable with its size and
//! lifetime, or not and why), and the timer's copy of the changed chunks to shared data.

use crate::cache::entry::Entry;
use crate::cache::fates::{seconds, Fate};
use crate::effects::host::Host;
use crate::effects::store::update;
use crate::invalidate::tags::OperationTags;
use crate::request::variant::Variant;
use crate::whatif::ring::{chunk_key, type_bucket, with_worker, Kind, Record, WORKERS_KEY};
use crate::worker::ctx::Ctx;
use crate::worker::operation_counts::operation_of;
use foldhash::fast::FixedState;
use std::hash::BuildHasher;

/// Whose record: the key's table hash and the operation, with its counter bucket if the caller
/// found it already (the tally did, when the counters are on), or an entity type's bucket; and
/// the key's variant, if it has one.
#[derive(Clone, Copy, Default)]
pub struct Whose<'a> {
    pub hash: u64,
    pub operation: Option<&'a OperationTags>,
    pub bucket: Option<u16>,
    pub entity: bool,
    pub variant: Variant,
    /// See `Record::answer`.
    pub answer: u32,
}

impl Whose<'_> {
    /// An entity's record: its key's table hash and its type.
    pub fn entity(hash: u64, typename: &str) -> Whose<'static> {
        Whose {
            hash,
            bucket: Some(type_bucket(typename)),
            entity: true,
            ..Whose::default()
        }
    }
}

/// A lookup to record: whose, when (ms, `None`: now), how it went, and the entry a hit was
/// answered from (bytes, lifetime in seconds).
pub struct Lookup<'a> {
    pub whose: Whose<'a>,
    pub at_ms: Option<u64>,
    pub kind: Kind,
    pub served: Option<(usize, u32)>,
}

/// Records a lookup (its time given, the hit path asks the host for no clock).
pub fn lookup(cx: &mut Ctx<'_, impl Host>, l: &Lookup<'_>) {
    if !cx.worker(|w| w.recent.is_on()) {
        return;
    }
    let (size, lifetime_s) = l.served.unwrap_or_default();
    let size = u32::try_from(size).unwrap_or(u32::MAX);
    let at_ms = l.at_ms.unwrap_or_else(|| cx.host().now_ms());
    push(cx, (l.whose, at_ms), (l.kind, 0), (size, lifetime_s));
}

/// Records the origin's answer: what became of it (`fate`), and the entry it was encoded as,
/// if it could be stored.
pub fn answer(cx: &mut Ctx<'_, impl Host>, whose: Whose<'_>, fate: Fate, entry: Option<&[u8]>) {
    // With the ring off, a store reads no clock and decodes nothing more for it.
    if !cx.worker(|w| w.recent.is_on()) {
        return;
    }
    let kind = match (fate, entry) {
        (Fate::NotStored(why), _) => (Kind::NotStorable, why.code()),
        (_, Some(_)) => (Kind::Storable, 0),
        (_, None) => return,
    };
    let shape = entry.map_or((0, 0), |bytes| {
        let size = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        (size, lifetime_s(bytes))
    });
    let at_ms = cx.host().now_ms();
    let whose = Whose {
        answer: entry.map_or(0, body_hash),
        ..whose
    };
    push(cx, (whose, at_ms), kind, shape);
}

/// A hash of an entry's body, the same in every worker (0 if it does not decode): only an
/// answer's body, since its headers carry times.
fn body_hash(entry: &[u8]) -> u32 {
    Entry::decode(entry).map_or(0, |e| {
        (FixedState::with_seed(BODY_SEED).hash_one(e.body) as u32).max(1)
    })
}

const BODY_SEED: u64 = 0x626f_6479_2d76_3031;

/// Records an entity's lookup on the batch path: a hit on `served` (the entry), else a miss.
pub fn entity_lookup(
    cx: &mut Ctx<'_, impl Host>,
    whose: Whose<'_>,
    at_ms: u64,
    served: Option<&[u8]>,
) {
    if !cx.worker(|w| w.recent.is_on()) {
        return;
    }
    let (kind, shape) = match served {
        Some(entry) => (Kind::Hit, (entry.len(), lifetime_s(entry))),
        None => (Kind::Miss, (0, 0)),
    };
    let l = Lookup {
        whose,
        at_ms: Some(at_ms),
        kind,
        served: Some(shape),
    };
    lookup(cx, &l);
}

/// An entry's freshness lifetime in seconds (0 if it does not read).
pub fn lifetime_s(entry: &[u8]) -> u32 {
    Entry::peek(entry).map_or(0, |p| {
        let ms = p.expires_at_ms.saturating_sub(p.stored_at_ms);
        u32::try_from(ms / 1000).unwrap_or(u32::MAX)
    })
}

fn push(
    cx: &mut Ctx<'_, impl Host>,
    (whose, at_ms): (Whose<'_>, u64),
    (kind, why): (Kind, u8),
    (size, lifetime_s): (u32, u32),
) {
    cx.worker_and_shared(|w, shared| {
        if !w.recent.is_on() {
            return;
        }
        let op = match whose.bucket {
            Some(b) => b,
            None => w.operations.bucket(shared, operation_of(whose.operation)),
        };
        w.recent.push(Record {
            at_ms,
            hash: whose.hash,
            op,
            kind,
            why,
            size,
            lifetime_s,
            entity: whose.entity,
            variant: whose.variant,
            answer: whose.answer,
        });
    });
}

/// Root, on its timer: copies the ring's changed chunks to shared data (listing this worker,
/// or its time, first), where a what-if asked on any worker reads them.
pub fn flush(cx: &mut Ctx<'_, impl Host>) {
    let (id, dirty) = cx.worker(|w| (w.id, w.recent.take_dirty()));
    if dirty.is_empty() {
        return;
    }
    let host = cx.host();
    let now_s = seconds(host.now_ms());
    // A failed write lists this worker at the next copy: only a what-if in between misses it.
    let _ = update(host, WORKERS_KEY, |old| {
        with_worker(old.unwrap_or_default(), id, now_s)
    });
    for (chunk, value) in dirty {
        // A chunk that could not be written is missing from the next what-if, nothing more.
        let _ = host.set(&chunk_key(id, chunk), &value);
    }
}
