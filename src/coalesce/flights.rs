//! Flight records in shared data: one record per in-flight key, claimed with compare-and-swap.
//! The leader's worker owns it; workers with followers add their wake-up queue as *watchers*.
//! When the fetch ends, the record briefly holds the result for those watchers, then is emptied.
//!
//! Slots are fixed (`flight_slots`, addressed by the key's hash) because Envoy never frees a
//! shared-data key. Every record carries its full key digest: two keys in one slot never share a
//! response; the later one simply goes upstream on its own.

use crate::coalesce::liveness::Alive;
use crate::effects::store::{SharedStore, StoreError};
use crate::request::key::{CacheKey, SlotKey};

const MAGIC: &[u8; 4] = b"GQLF";
const VERSION: u8 = 1;
const TAG_IN_FLIGHT: u8 = 1;
const TAG_DONE: u8 = 2;
const SLOT_PREFIX: &str = "graphql-cache/v1/flight/";
/// Bounded so a record stays small; a worker that cannot register just goes upstream alone.
pub const MAX_WATCHERS: usize = 64;
/// CAS retries before giving up on coalescing for one request.
const CAS_ATTEMPTS: usize = 8;
/// CAS retries to close a flight: watchers wait on it, so it is worth insisting.
const COMPLETE_ATTEMPTS: usize = 64;
/// The CAS token used to create a slot: Envoy ignores CAS on a missing key, and no existing key
/// has this token in practice, so the write cannot overwrite a slot another worker just created.
const CREATE_CAS: u32 = u32::MAX;

/// What a flight slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlightRecord {
    InFlight {
        digest: [u8; 32],
        owner: u64,
        deadline_ms: u64,
        /// Wake-up queue tokens of the workers with followers.
        watchers: Vec<u32>,
    },
    Done {
        digest: [u8; 32],
        owner: u64,
        finished_ms: u64,
        /// The response as an encoded [`crate::cache::entry::Entry`]; `None` when it could not be shared
        /// (too large, or not representable), and followers must go upstream themselves.
        result: Option<Vec<u8>>,
    },
}

/// A record's fixed head (format, kind, key, owner and its one instant), sized for `rest` more
/// bytes: both kinds of record start alike.
fn record_head(tag: u8, digest: &[u8; 32], owner: u64, at_ms: u64, rest: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + 32 + 16 + rest);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(tag);
    out.extend_from_slice(digest);
    out.extend_from_slice(&owner.to_le_bytes());
    out.extend_from_slice(&at_ms.to_le_bytes());
    out
}

/// A `Done` record holding `result` as it is given (the one copy is into the record: a flight's
/// result is an encoded answer, up to `max_entry_bytes`).
fn encode_done(digest: &[u8; 32], owner: u64, finished_ms: u64, result: Option<&[u8]>) -> Vec<u8> {
    let rest = 1 + result.map_or(0, <[u8]>::len);
    let mut out = record_head(TAG_DONE, digest, owner, finished_ms, rest);
    match result {
        Some(bytes) => {
            out.push(1);
            out.extend_from_slice(bytes);
        }
        None => out.push(0),
    }
    out
}

impl FlightRecord {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            FlightRecord::Done {
                digest,
                owner,
                finished_ms,
                result,
            } => encode_done(digest, *owner, *finished_ms, result.as_deref()),
            FlightRecord::InFlight {
                digest,
                owner,
                deadline_ms,
                watchers,
            } => {
                let n = watchers.len().min(MAX_WATCHERS);
                let mut out = record_head(TAG_IN_FLIGHT, digest, *owner, *deadline_ms, 1 + 4 * n);
                out.push(n as u8);
                for w in &watchers[..n] {
                    out.extend_from_slice(&w.to_le_bytes());
                }
                out
            }
        }
    }

    /// `None` for an empty slot, another format version, or garbage: all mean "free".
    pub fn decode(bytes: &[u8]) -> Option<FlightRecord> {
        if bytes.len() < 6 + 32 + 16 + 1 || &bytes[..4] != MAGIC || bytes[4] != VERSION {
            return None;
        }
        let tag = bytes[5];
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[6..38]);
        let owner = u64::from_le_bytes(bytes[38..46].try_into().ok()?);
        let ms = u64::from_le_bytes(bytes[46..54].try_into().ok()?);
        let rest = &bytes[54..];
        match tag {
            TAG_IN_FLIGHT => {
                let n = *rest.first()? as usize;
                // The encoder never writes more.
                if n > MAX_WATCHERS {
                    return None;
                }
                let list = rest.get(1..1 + 4 * n)?;
                if rest.len() != 1 + 4 * n {
                    return None;
                }
                let watchers = list
                    .chunks_exact(4)
                    .filter_map(|c| c.try_into().ok().map(u32::from_le_bytes))
                    .collect();
                Some(FlightRecord::InFlight {
                    digest,
                    owner,
                    deadline_ms: ms,
                    watchers,
                })
            }
            TAG_DONE => {
                let result = match rest.first()? {
                    0 if rest.len() == 1 => None,
                    1 => Some(rest[1..].to_vec()),
                    _ => return None,
                };
                Some(FlightRecord::Done {
                    digest,
                    owner,
                    finished_ms: ms,
                    result,
                })
            }
            _ => None,
        }
    }
}

/// How a request joins the flight for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// This worker claimed the key: it fetches for everyone.
    Lead,
    /// Another worker is fetching and will wake this worker's queue.
    Follow,
    /// No coalescing possible (slot busy with another key, too many watchers, CAS storm):
    /// go upstream alone.
    Alone,
}

/// What a request may do with a key's flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinMode {
    /// A miss: lead if nobody fetches, else follow.
    MayLead,
    /// A follower re-registering: never claims (it follows or is `Alone`).
    FollowOnly,
    /// A background refresh: lead if nobody fetches, else leave it (`Alone`), never watch.
    LeadOnly,
}

/// What a request claims when it joins a key's flight.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    pub key: CacheKey,
    /// The claiming worker's owner id.
    pub me: u64,
    /// The claiming worker's wake-up queue.
    pub queue: u32,
    pub now_ms: u64,
    /// How long a new leader holds the flight.
    pub lease_ms: u64,
    pub mode: JoinMode,
}

impl Claim {
    /// Following `key`'s flight if another worker leads one (never leading it).
    pub fn follow_only(key: CacheKey, me: u64, queue: u32, now_ms: u64) -> Claim {
        Claim {
            key,
            me,
            queue,
            now_ms,
            lease_ms: 0,
            mode: JoinMode::FollowOnly,
        }
    }

    /// The record to write over `record`, with what writing it means; `Err` when nothing is to
    /// be written.
    fn next(
        &self,
        record: Option<FlightRecord>,
        alive: &Alive,
    ) -> Result<(FlightRecord, Join), Join> {
        match record {
            // A leader whose worker stopped beating is treated as past its deadline.
            Some(FlightRecord::InFlight {
                digest,
                owner,
                deadline_ms,
                watchers,
            }) if deadline_ms > self.now_ms && (owner == self.me || alive.contains(owner)) => {
                if digest != self.key.digest || self.mode == JoinMode::LeadOnly {
                    return Err(Join::Alone);
                }
                self.in_flight(owner, deadline_ms, watchers)
            }
            _ if self.mode == JoinMode::FollowOnly => Err(Join::Alone),
            // Free, finished, or abandoned by a leader that missed its deadline: take it.
            _ => Ok((self.lead(Vec::new()), Join::Lead)),
        }
    }

    /// Joining a live flight of this key led by `owner`.
    fn in_flight(
        &self,
        owner: u64,
        deadline_ms: u64,
        mut watchers: Vec<u32>,
    ) -> Result<(FlightRecord, Join), Join> {
        if watchers.contains(&self.queue) {
            return Err(Join::Follow);
        }
        if owner == self.me {
            if self.mode == JoinMode::FollowOnly {
                return Err(Join::Alone);
            }
            // Only reachable when this worker has no local flight for the key (it checks its
            // own first): a record its own fetch failed to close. Retake it.
            return Ok((self.lead(watchers), Join::Lead));
        }
        if watchers.len() >= MAX_WATCHERS {
            return Err(Join::Alone);
        }
        watchers.push(self.queue);
        let record = FlightRecord::InFlight {
            digest: self.key.digest,
            owner,
            deadline_ms,
            watchers,
        };
        Ok((record, Join::Follow))
    }

    /// This worker's flight record as leader, for a lease from now.
    fn lead(&self, watchers: Vec<u32>) -> FlightRecord {
        FlightRecord::InFlight {
            digest: self.key.digest,
            owner: self.me,
            deadline_ms: self.now_ms.saturating_add(self.lease_ms),
            watchers,
        }
    }
}

/// What a worker finds when it looks at a key's flight after a wake-up or a timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// The fetch finished; its shareable result (or `None`: go upstream).
    Done(Option<Vec<u8>>),
    /// Still being fetched, and this worker is registered for the wake-up.
    Waiting,
    /// Nothing to wait for any more (owner's deadline passed, slot reused, or emptied).
    Gone,
}

#[derive(Debug, Clone, Copy)]
pub struct FlightTable {
    slots: u32,
    secret: SlotKey,
}

impl FlightTable {
    pub fn new(slots: u32, secret: SlotKey) -> Self {
        FlightTable {
            slots: slots.max(1),
            secret,
        }
    }

    pub fn slot_name_at(&self, index: u32) -> String {
        format!("{SLOT_PREFIX}{index}")
    }

    fn slot_name(&self, key: &CacheKey) -> String {
        self.slot_name_at(key.slot(self.slots, &self.secret))
    }

    /// Creates the slot keys that do not exist yet, so that claims can use CAS (Envoy has no
    /// insert-if-absent). Called at configuration time.
    pub fn precreate(&self, store: &impl SharedStore) {
        for i in 0..self.slots {
            let name = self.slot_name_at(i);
            if store.get_cas(&name) == (None, None) {
                let _ = store.set_cas(&name, b"", Some(CREATE_CAS));
            }
        }
    }

    /// Claims the key, or registers the claim's queue as a watcher of the fetch already in
    /// flight, as its mode allows.
    pub fn join(&self, store: &impl SharedStore, claim: &Claim, alive: &Alive) -> Join {
        let name = self.slot_name(&claim.key);
        for _ in 0..CAS_ATTEMPTS {
            let (value, cas) = store.get_cas(&name);
            let Some(cas) = cas else {
                // Never created (precreate raced or was skipped): create it empty, then retry
                // with a real CAS token. A mismatch means another worker created it first.
                if let Err(StoreError::Failed) = store.set_cas(&name, b"", Some(CREATE_CAS)) {
                    return Join::Alone;
                }
                continue;
            };
            let record = value.as_deref().and_then(FlightRecord::decode);
            let (next, join) = match claim.next(record, alive) {
                Ok(next) => next,
                Err(join) => return join,
            };
            match store.set_cas(&name, &next.encode(), Some(cas)) {
                Ok(()) => return join,
                Err(StoreError::CasMismatch) => continue,
                Err(StoreError::Failed) => return Join::Alone,
            }
        }
        Join::Alone
    }

    /// Ends the leader's flight. With no watchers the slot is emptied at once (nothing is kept);
    /// otherwise it holds `result` for them. Returns the queues to wake.
    pub fn complete(
        &self,
        store: &impl SharedStore,
        key: &CacheKey,
        me: u64,
        result: Option<&[u8]>,
        now_ms: u64,
    ) -> Vec<u32> {
        let name = self.slot_name(key);
        for _ in 0..COMPLETE_ATTEMPTS {
            let (value, cas) = store.get_cas(&name);
            let watchers = match value.as_deref().and_then(FlightRecord::decode) {
                Some(FlightRecord::InFlight {
                    digest,
                    owner,
                    watchers,
                    ..
                }) if digest == key.digest && owner == me => watchers,
                // Taken over after our deadline: the new owner will answer its own watchers.
                _ => return Vec::new(),
            };
            let next = if watchers.is_empty() {
                Vec::new()
            } else {
                encode_done(&key.digest, me, now_ms, result)
            };
            match store.set_cas(&name, &next, cas) {
                Ok(()) => return watchers,
                Err(StoreError::CasMismatch) => continue,
                Err(StoreError::Failed) => return watchers,
            }
        }
        Vec::new()
    }

    /// Looks at the flight a follower on this worker waits for, re-registering `queue` if the
    /// key is being fetched again under a new flight.
    pub fn peek(
        &self,
        store: &impl SharedStore,
        key: &CacheKey,
        me: u64,
        queue: u32,
        now_ms: u64,
        alive: &Alive,
    ) -> Peek {
        let name = self.slot_name(key);
        let (value, _) = store.get_cas(&name);
        match value.as_deref().and_then(FlightRecord::decode) {
            Some(FlightRecord::Done { digest, result, .. }) if digest == key.digest => {
                Peek::Done(result)
            }
            Some(FlightRecord::InFlight {
                digest,
                deadline_ms,
                owner,
                watchers,
            }) if digest == key.digest
                && deadline_ms > now_ms
                && (owner == me || alive.contains(owner)) =>
            {
                if watchers.contains(&queue) || owner == me {
                    Peek::Waiting
                } else {
                    match self.join(store, &Claim::follow_only(*key, me, queue, now_ms), alive) {
                        Join::Follow => Peek::Waiting,
                        _ => Peek::Gone,
                    }
                }
            }
            _ => Peek::Gone,
        }
    }

    /// [`FlightTable::peek`] with the workers alive now.
    pub fn peek_now(
        &self,
        store: &impl SharedStore,
        key: &CacheKey,
        (me, queue): (u64, u32),
        now_ms: u64,
    ) -> Peek {
        self.peek(store, key, me, queue, now_ms, &Alive::read(store, now_ms))
    }

    /// Empties a finished record this worker published, once its watchers had time to read it.
    pub fn clear_done(&self, store: &impl SharedStore, key: &CacheKey, me: u64, finished_ms: u64) {
        let name = self.slot_name(key);
        let (value, cas) = store.get_cas(&name);
        if let Some(FlightRecord::Done {
            digest,
            owner,
            finished_ms: f,
            ..
        }) = value.as_deref().and_then(FlightRecord::decode)
        {
            if digest == key.digest && owner == me && f == finished_ms {
                let _ = store.set_cas(&name, b"", cas);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    fn key(n: u8) -> CacheKey {
        CacheKey { digest: [n; 32] }
    }

    fn claim(
        key: &CacheKey,
        me: u64,
        queue: u32,
        now_ms: u64,
        lease_ms: u64,
        mode: JoinMode,
    ) -> Claim {
        Claim {
            key: *key,
            me,
            queue,
            now_ms,
            lease_ms,
            mode,
        }
    }

    /// A miss joining with a 1 s lease, every worker alive.
    fn join(t: &FlightTable, s: &MapStore, k: &CacheKey, me: u64, q: u32, now_ms: u64) -> Join {
        t.join(
            s,
            &claim(k, me, q, now_ms, 1000, JoinMode::MayLead),
            &Alive::everyone(),
        )
    }

    fn peek(t: &FlightTable, s: &MapStore, k: &CacheKey, me: u64, q: u32, now_ms: u64) -> Peek {
        t.peek(s, k, me, q, now_ms, &Alive::everyone())
    }

    #[test]
    fn records_round_trip_and_garbage_is_free() {
        let a = FlightRecord::InFlight {
            digest: [1; 32],
            owner: 7,
            deadline_ms: 99,
            watchers: vec![3, 4],
        };
        assert_eq!(FlightRecord::decode(&a.encode()), Some(a));
        let d = FlightRecord::Done {
            digest: [2; 32],
            owner: 7,
            finished_ms: 5,
            result: Some(b"entry".to_vec()),
        };
        assert_eq!(FlightRecord::decode(&d.encode()), Some(d));
        let none = FlightRecord::Done {
            digest: [2; 32],
            owner: 7,
            finished_ms: 5,
            result: None,
        };
        assert_eq!(FlightRecord::decode(&none.encode()), Some(none));
        assert_eq!(FlightRecord::decode(b""), None);
        assert_eq!(FlightRecord::decode(b"GQLF\x02garbage"), None);
        let bytes = FlightRecord::InFlight {
            digest: [1; 32],
            owner: 7,
            deadline_ms: 99,
            watchers: vec![3],
        }
        .encode();
        for len in 0..bytes.len() {
            assert_eq!(FlightRecord::decode(&bytes[..len]), None, "len {len}");
        }
    }

    const W1: u64 = 1;
    const W2: u64 = 2;
    const Q1: u32 = 11;
    const Q2: u32 = 22;

    #[test]
    fn one_leader_per_key_across_workers() {
        let store = MapStore::default();
        let t = FlightTable::new(16, SlotKey::default());
        t.precreate(&store);
        let k = key(1);
        assert_eq!(join(&t, &store, &k, W1, Q1, 0), Join::Lead);
        assert_eq!(join(&t, &store, &k, W2, Q2, 1), Join::Follow);
        assert_eq!(
            join(&t, &store, &k, W2, Q2, 2),
            Join::Follow,
            "registered once"
        );
        assert_eq!(
            join(&t, &store, &k, W1, Q1, 3),
            Join::Lead,
            "an owner without a local flight retakes its stale record, keeping the watchers"
        );
        let wake = t.complete(&store, &k, W1, Some(b"result".as_slice()), 10);
        assert_eq!(wake, vec![Q2]);
        assert_eq!(
            peek(&t, &store, &k, W2, Q2, 11),
            Peek::Done(Some(b"result".to_vec()))
        );
        t.clear_done(&store, &k, W1, 10);
        assert_eq!(peek(&t, &store, &k, W2, Q2, 12), Peek::Gone);
        // The next miss starts a new flight.
        assert_eq!(join(&t, &store, &k, W2, Q2, 13), Join::Lead);
    }

    #[test]
    fn without_watchers_nothing_is_kept() {
        let store = MapStore::default();
        let t = FlightTable::new(4, SlotKey::default());
        let k = key(2);
        assert_eq!(
            join(&t, &store, &k, W1, Q1, 0),
            Join::Lead,
            "works without precreate"
        );
        assert!(t
            .complete(&store, &k, W1, Some(b"r".as_slice()), 5)
            .is_empty());
        let name = t.slot_name(&k);
        assert_eq!(store.get(&name), None);
    }

    #[test]
    fn a_done_record_is_not_a_cache() {
        let store = MapStore::default();
        let t = FlightTable::new(4, SlotKey::default());
        let k = key(3);
        join(&t, &store, &k, W1, Q1, 0);
        join(&t, &store, &k, W2, Q2, 0);
        t.complete(&store, &k, W1, Some(b"old".as_slice()), 5);
        // A request arriving after completion fetches anew instead of reading the old result.
        assert_eq!(join(&t, &store, &k, W1, Q1, 6), Join::Lead);
        assert_eq!(
            peek(&t, &store, &k, W2, Q2, 7),
            Peek::Waiting,
            "W2 re-registers on the new flight"
        );
    }

    #[test]
    fn an_expired_leader_is_replaced() {
        let store = MapStore::default();
        let t = FlightTable::new(4, SlotKey::default());
        let k = key(4);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W1, Q1, 0, 100, JoinMode::MayLead),
                &Alive::everyone()
            ),
            Join::Lead
        );
        assert_eq!(peek(&t, &store, &k, W2, Q2, 100), Peek::Gone);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W2, Q2, 100, 100, JoinMode::MayLead),
                &Alive::everyone()
            ),
            Join::Lead
        );
        // The old leader finishing late does not disturb the new flight.
        assert!(t.complete(&store, &k, W1, None, 150).is_empty());
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W1, Q1, 160, 100, JoinMode::MayLead),
                &Alive::everyone()
            ),
            Join::Follow
        );
    }

    #[test]
    fn a_re_registering_follower_never_takes_over() {
        let store = MapStore::default();
        let t = FlightTable::new(2, SlotKey::default());
        let k = key(10);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W1, Q1, 0, 1000, JoinMode::FollowOnly),
                &Alive::everyone()
            ),
            Join::Alone,
            "free slot, may not lead"
        );
        join(&t, &store, &k, W1, Q1, 0);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W2, Q2, 0, 1000, JoinMode::FollowOnly),
                &Alive::everyone()
            ),
            Join::Follow
        );
    }

    #[test]
    fn a_leader_that_stopped_beating_is_replaced_at_once() {
        let store = MapStore::default();
        let t = FlightTable::new(2, SlotKey::default());
        let k = key(13);
        let only_w2 = Alive::read(&store, 0);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W1, Q1, 0, 10_000, JoinMode::MayLead),
                &Alive::everyone()
            ),
            Join::Lead
        );
        // W1's VM is gone (it never beats): W2 does not follow it for ten seconds.
        assert_eq!(t.peek(&store, &k, W2, Q2, 1, &only_w2), Peek::Gone);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W2, Q2, 1, 10_000, JoinMode::MayLead),
                &only_w2
            ),
            Join::Lead
        );
    }

    #[test]
    fn a_refresh_leads_or_leaves_it_never_watches() {
        let store = MapStore::default();
        let t = FlightTable::new(2, SlotKey::default());
        let k = key(12);
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W1, Q1, 0, 1000, JoinMode::LeadOnly),
                &Alive::everyone()
            ),
            Join::Lead
        );
        assert_eq!(
            t.join(
                &store,
                &claim(&k, W2, Q2, 0, 1000, JoinMode::LeadOnly),
                &Alive::everyone()
            ),
            Join::Alone
        );
        assert_eq!(
            t.complete(&store, &k, W1, None, 1),
            Vec::<u32>::new(),
            "no watcher added"
        );
    }

    #[test]
    fn creating_a_slot_never_overwrites_one_just_created() {
        let store = MapStore::default();
        let t = FlightTable::new(1, SlotKey::default());
        let k = key(11);
        assert_eq!(join(&t, &store, &k, W1, Q1, 0), Join::Lead);
        // A worker that saw the slot missing a moment ago creates it now: its write must fail.
        let name = t.slot_name(&k);
        assert_eq!(
            store.set_cas(&name, b"", Some(CREATE_CAS)),
            Err(StoreError::CasMismatch)
        );
        assert_eq!(join(&t, &store, &k, W2, Q2, 1), Join::Follow);
    }

    #[test]
    fn keys_sharing_a_slot_never_share_a_flight() {
        let store = MapStore::default();
        let t = FlightTable::new(1, SlotKey::default());
        assert_eq!(join(&t, &store, &key(5), W1, Q1, 0), Join::Lead);
        assert_eq!(join(&t, &store, &key(6), W2, Q2, 0), Join::Alone);
        assert_eq!(peek(&t, &store, &key(6), W2, Q2, 0), Peek::Gone);
    }

    #[test]
    fn watchers_are_bounded() {
        let store = MapStore::default();
        let t = FlightTable::new(1, SlotKey::default());
        let k = key(7);
        join(&t, &store, &k, 0, 0, 0);
        for q in 1..=MAX_WATCHERS as u32 {
            assert_eq!(join(&t, &store, &k, u64::from(q), q, 0), Join::Follow);
        }
        assert_eq!(join(&t, &store, &k, 999, 999, 0), Join::Alone);
    }

    #[test]
    fn a_failed_or_unshareable_fetch_tells_watchers_to_go_upstream() {
        let store = MapStore::default();
        let t = FlightTable::new(2, SlotKey::default());
        let k = key(8);
        join(&t, &store, &k, W1, Q1, 0);
        join(&t, &store, &k, W2, Q2, 0);
        assert_eq!(t.complete(&store, &k, W1, None, 1), vec![Q2]);
        assert_eq!(peek(&t, &store, &k, W2, Q2, 2), Peek::Done(None));
    }
}
