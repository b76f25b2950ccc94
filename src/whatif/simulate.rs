//! Replays the recent traffic (`whatif::ring`) through a model of the store under some settings:
//! its bytes, and each operation's freshness lifetime (or none: not cached). The model keeps
//! entries until they expire or, past the budget, evicts the one used least recently; it stores
//! what the origin answered as the records say (size, lifetime, storable or not).
//!
//! Each lookup's answer is the one the origin gave for its key next (a miss's own answer), else
//! the last one before, else the entry a hit was served from. A lookup with no answer known is
//! never a simulated hit. Coalesced lookups are neither hits nor stores (a follower shares its
//! leader's fetch in any configuration); a lookup that found its entry purged drops it first.

use crate::fast_hash::FastMap;
use crate::whatif::ring::{Kind, Record};
use std::collections::VecDeque;

/// What the origin answered for a key, as far as the records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    size: u32,
    lifetime_s: u32,
    storable: bool,
}

/// How long a group's answers are kept under some settings: `None` when they are not cached at
/// all; given the lifetime an answer was recorded with (which the origin's own headers may have
/// shortened).
pub trait Lifetimes {
    fn lifetime_s(&self, group: Group, recorded_s: u32) -> Option<u32>;
}

/// Whose figures: an operation's counter bucket (`false`), or an entity type's
/// (`ring::type_bucket`, `true`).
pub type Group = (bool, u16);

/// Which key a record's entry is held under in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keying {
    /// The table's own key, as recorded.
    AsRecorded,
    /// The key under a configuration keeping only the vary headers whose bit is set
    /// (`Variant::key`); a record without a variant keeps its own.
    Keeping(u8),
}

impl Keying {
    pub fn of(self, r: &Record) -> u64 {
        match self {
            Keying::Keeping(kept) if r.variant.shape != 0 => r.variant.key(kept),
            _ => r.hash,
        }
    }
}

/// One operation's figures over the replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Lookups (hits, misses, coalesced).
    pub lookups: u64,
    /// Served from an entry, as recorded.
    pub hits: u64,
    /// Answered by another request's fetch.
    pub coalesced: u64,
    /// Served from an entry, as simulated.
    pub simulated: u64,
}

/// Replays `records` (in time order) under `cache_bytes` and `lifetimes`, entries held by
/// `keying`: figures by group. Each lookup's answer is found by the key it was recorded under,
/// whatever the keying.
pub fn replay(
    records: &[Record],
    cache_bytes: u64,
    lifetimes: &impl Lifetimes,
    keying: Keying,
) -> FastMap<Group, Figures> {
    let answers = answers(records);
    let mut store = Model::new(cache_bytes);
    let mut out: FastMap<Group, Figures> = FastMap::default();
    for (r, answer) in records.iter().zip(answers) {
        if !r.kind.is_lookup() {
            continue;
        }
        let group = (r.entity, r.op);
        let key = keying.of(r);
        let figures = out.entry(group).or_default();
        figures.lookups += 1;
        figures.hits += u64::from(r.kind == Kind::Hit);
        figures.coalesced += u64::from(r.kind == Kind::Coalesced);
        match r.kind {
            Kind::Coalesced => continue,
            Kind::Purged => store.remove(key),
            _ => {}
        }
        if store.fresh(key, r.at_ms) {
            figures.simulated += 1;
            continue;
        }
        let Some(a) = answer.filter(|a| a.storable && a.size > 0) else {
            continue;
        };
        if let Some(life) = lifetimes.lifetime_s(group, a.lifetime_s).filter(|l| *l > 0) {
            let expires = r.at_ms.saturating_add(u64::from(life) * 1000);
            store.insert(key, expires, u64::from(a.size), r.at_ms);
        }
    }
    out
}

/// Each lookup's answer (see the module's comment); `None` for the other records.
fn answers(records: &[Record]) -> Vec<Option<Answer>> {
    let of = |r: &Record| match r.kind {
        Kind::Storable | Kind::Hit if r.size > 0 => Some(Answer {
            size: r.size,
            lifetime_s: r.lifetime_s,
            storable: true,
        }),
        Kind::NotStorable => Some(Answer {
            size: 0,
            lifetime_s: 0,
            storable: false,
        }),
        _ => None,
    };
    let mut out = vec![None; records.len()];
    let mut next: FastMap<u64, Answer> = FastMap::default();
    for (i, r) in records.iter().enumerate().rev() {
        let own = of(r);
        if r.kind.is_lookup() {
            out[i] = match r.kind {
                Kind::Hit => own.or_else(|| next.get(&r.hash).copied()),
                _ => next.get(&r.hash).copied(),
            };
        }
        if let Some(a) = own.filter(|_| !r.kind.is_lookup()) {
            next.insert(r.hash, a);
        }
    }
    let mut last: FastMap<u64, Answer> = FastMap::default();
    for (i, r) in records.iter().enumerate() {
        if r.kind.is_lookup() && out[i].is_none() {
            out[i] = last.get(&r.hash).copied();
        }
        if let Some(a) = of(r) {
            last.insert(r.hash, a);
        }
    }
    out
}

/// The store's model: entries with their expiry and size, the least recently used evicted
/// first past the budget.
struct Model {
    budget: u64,
    bytes: u64,
    entries: FastMap<u64, Held>,
    /// Use order, oldest first: (use stamp, key); a stale stamp is skipped when popped.
    order: VecDeque<(u64, u64)>,
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    expires_ms: u64,
    size: u64,
    used: u64,
}

impl Model {
    fn new(budget: u64) -> Model {
        Model {
            budget,
            bytes: 0,
            entries: FastMap::default(),
            order: VecDeque::new(),
            clock: 0,
        }
    }

    fn fresh(&mut self, key: u64, now_ms: u64) -> bool {
        let Some(held) = self.entries.get_mut(&key) else {
            return false;
        };
        if held.expires_ms <= now_ms {
            self.remove(key);
            return false;
        }
        self.clock += 1;
        held.used = self.clock;
        self.order.push_back((self.clock, key));
        true
    }

    fn remove(&mut self, key: u64) {
        if let Some(held) = self.entries.remove(&key) {
            self.bytes -= held.size;
        }
    }

    fn insert(&mut self, key: u64, expires_ms: u64, size: u64, now_ms: u64) {
        self.remove(key);
        if size > self.budget {
            return;
        }
        while self.bytes + size > self.budget {
            self.evict_one(now_ms);
        }
        self.clock += 1;
        self.entries.insert(
            key,
            Held {
                expires_ms,
                size,
                used: self.clock,
            },
        );
        self.bytes += size;
        self.order.push_back((self.clock, key));
    }

    /// Evicts the least recently used entry (stale use stamps are skipped).
    fn evict_one(&mut self, _now_ms: u64) {
        while let Some((stamp, key)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|h| h.used == stamp) {
                self.remove(key);
                return;
            }
        }
        // Nothing left to evict: the byte count is whatever the entries hold.
        self.bytes = self.entries.values().map(|h| h.size).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::variant::Variant;

    struct Ttl(Option<u32>);
    impl Lifetimes for Ttl {
        fn lifetime_s(&self, _: Group, _: u32) -> Option<u32> {
            self.0
        }
    }

    const OP: Group = (false, 1);

    fn run(records: &[Record], bytes: u64, ttl: Option<u32>) -> Figures {
        replay(records, bytes, &Ttl(ttl), Keying::AsRecorded)[&OP]
    }

    fn at(at_ms: u64, hash: u64, kind: Kind) -> Record {
        Record {
            at_ms,
            hash,
            op: 1,
            kind,
            why: 0,
            size: if matches!(kind, Kind::Storable) {
                100
            } else {
                0
            },
            lifetime_s: if matches!(kind, Kind::Storable) {
                10
            } else {
                0
            },
            entity: false,
            variant: Variant::default(),
            answer: 0,
        }
    }

    /// A key asked for every `gap_ms`, `n` times, missing (and stored) each time as recorded.
    fn repeats(hash: u64, gap_ms: u64, n: u64) -> Vec<Record> {
        (0..n)
            .flat_map(|i| {
                [
                    at(i * gap_ms, hash, Kind::Miss),
                    at(i * gap_ms + 1, hash, Kind::Storable),
                ]
            })
            .collect()
    }

    #[test]
    fn a_longer_lifetime_turns_repeats_within_it_into_hits() {
        let records = repeats(1, 30_000, 5);
        let short = run(&records, 1 << 20, Some(10));
        let long = run(&records, 1 << 20, Some(60));
        assert_eq!((short.lookups, short.hits, short.simulated), (5, 0, 0));
        // Stored at 0, hit at 30 s, expired at 60 s (stored again), hit at 90 s, expired at 120.
        assert_eq!(long.simulated, 2);
        assert_eq!(run(&records, 1 << 20, None).simulated, 0);
    }

    #[test]
    fn past_the_budget_the_least_recently_used_entry_goes() {
        // Three keys of 100 bytes in a 200-byte store, asked a, b, c, a: a was evicted by c.
        let mut records = Vec::new();
        for (i, k) in [1, 2, 3, 1].into_iter().enumerate() {
            records.push(at(i as u64 * 10, k, Kind::Miss));
            records.push(at(i as u64 * 10 + 1, k, Kind::Storable));
        }
        assert_eq!(run(&records, 200, Some(60)).simulated, 0);
        assert_eq!(run(&records, 300, Some(60)).simulated, 1);
    }

    #[test]
    fn answers_not_storable_purges_and_followers_are_never_simulated_hits() {
        let mut records = vec![
            at(0, 1, Kind::Miss),
            at(1, 1, Kind::NotStorable),
            at(5, 1, Kind::Miss),
            at(6, 1, Kind::NotStorable),
        ];
        records.extend([
            at(10, 2, Kind::Miss),
            at(11, 2, Kind::Storable),
            at(12, 2, Kind::Coalesced),
            at(20, 2, Kind::Purged),
            at(21, 2, Kind::Storable),
            at(30, 2, Kind::Hit),
        ]);
        let figures = run(&records, 1 << 20, Some(60));
        assert_eq!(figures.lookups, 6);
        assert_eq!(figures.hits, 1);
        assert_eq!(figures.simulated, 1, "only the last lookup of key 2");
    }

    #[test]
    fn a_hit_on_an_entry_stored_before_the_records_begin_knows_its_own_answer() {
        let mut hit = at(0, 9, Kind::Hit);
        (hit.size, hit.lifetime_s) = (50, 10);
        let records = [hit, at(5_000, 9, Kind::Miss)];
        // Simulated from nothing: the hit stores, the later lookup hits within 10 s.
        assert_eq!(run(&records, 1 << 20, Some(10)).simulated, 1);
    }
}
