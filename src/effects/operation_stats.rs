//! Counters per GraphQL operation, as Envoy stats tagged with the operation's name: a bounded
//! set of names (`operation_stats.top_k`), the rest counted as `other`.
//!
//! A stat is named `graphql_cache.op.<counter>.graphql_operation=.=<name>;.;` (and
//! `graphql_cache_reason=.=<reason>;.;` for counters by reason), the form Envoy's `stats_tags`
//! regexes turn into tags: `/stats/prometheus` shows `graphql_cache_op_hits{graphql_operation="GetUser"}`,
//! one metric with a label, not one metric per operation.
//!
//! Which names have their own series is agreed by every worker through one shared-data value
//! (the registry, names in the order they were admitted): a name enters once a worker has seen it
//! `min_requests` times and while there is room; a name never leaves (a series that stopped and
//! restarted under another bucket would lie), so the first `top_k` names to be asked often enough
//! keep their places for the life of the Envoy process.

use crate::config::OperationStats as Settings;
use crate::effects::store::{SharedStore, StoreError, CREATE_CAS};
use crate::fast_hash::FastMap;

/// The registry of admitted names, one per line.
pub const REGISTRY_KEY: &str = "graphql-cache/v2/operation-names";
/// The longest name kept (a client picks it); longer ones are cut.
pub const MAX_NAME: usize = 64;
/// Names counted towards `min_requests` per worker at most; past it the count starts over.
const MAX_CANDIDATES: usize = 1024;
const CAS_ATTEMPTS: usize = 3;

/// The buckets every worker has, before the admitted names.
const OTHER: u16 = 0;
const ANONYMOUS: u16 = 1;
const UNKNOWN: u16 = 2;
const SPECIAL: [&str; 3] = ["other", "anonymous", "unknown"];

/// The operation a request was counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    /// Bypassed before its operation was read (bad input, a method the filter does not read).
    Unread,
    /// An operation without a name.
    Anonymous,
    Named(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCounter {
    /// Served from a fresh entry (this Envoy's, or the fleet's L2).
    Hits,
    /// Served from a stale entry.
    Stale,
    /// Answered by another request's fetch.
    Coalesced,
    /// Looked up and not found (by reason: `cold`, `evicted`, `collision`, `expired`, `purged`).
    Misses,
    /// Not looked up (by reason: the bypass reason).
    Bypasses,
    /// An origin answer that was stored.
    Stores,
    /// An origin answer that was not (by reason: why not).
    NotStored,
    /// A miss a larger store would have served (by reason: `2x`, `4x` its `cache_bytes`).
    WouldHit,
    /// Milliseconds the origin took to produce the entries hits were served from.
    OriginMsSaved,
}

impl OpCounter {
    const PLAIN: [OpCounter; 5] = [
        OpCounter::Hits,
        OpCounter::Stale,
        OpCounter::Coalesced,
        OpCounter::Stores,
        OpCounter::OriginMsSaved,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpCounter::Hits => "hits",
            OpCounter::Stale => "stale",
            OpCounter::Coalesced => "coalesced",
            OpCounter::Misses => "misses",
            OpCounter::Bypasses => "bypasses",
            OpCounter::Stores => "stores",
            OpCounter::NotStored => "not_stored",
            OpCounter::WouldHit => "would_hit",
            OpCounter::OriginMsSaved => "origin_ms_saved",
        }
    }

    /// The place of a counter without reasons in a bucket's ids.
    fn plain(self) -> Option<usize> {
        OpCounter::PLAIN.iter().position(|c| *c == self)
    }
}

/// The Envoy stat name of `counter` for the bucket `name`, by `reason`.
pub fn stat_name(counter: OpCounter, name: &str, reason: Option<&str>) -> String {
    let mut out = format!(
        "graphql_cache.op.{}.graphql_operation=.={name};.;",
        counter.name()
    );
    if let Some(r) = reason {
        out.push_str("graphql_cache_reason=.=");
        out.push_str(r);
        out.push_str(";.;");
    }
    out
}

/// A name as a stat tag may hold it: GraphQL's name characters, at most [`MAX_NAME`].
pub fn sanitize(name: &str) -> std::borrow::Cow<'_, str> {
    let clean = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if name.len() <= MAX_NAME && name.chars().all(clean) {
        return std::borrow::Cow::Borrowed(name);
    }
    std::borrow::Cow::Owned(name.chars().filter(|c| clean(*c)).take(MAX_NAME).collect())
}

fn decode(registry: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(registry)
        .unwrap_or_default()
        .split('\n')
        .filter(|n| !n.is_empty())
}

/// Every bucket's operation name, by bucket, from the registry's value: `None` for the special
/// buckets (`other`, `anonymous`, `unknown`).
pub fn bucket_names(registry: &[u8]) -> Vec<Option<String>> {
    let special = SPECIAL.iter().map(|_| None);
    special
        .chain(decode(registry).map(|n| Some(n.to_string())))
        .collect()
}

/// A stat id as far as this worker knows: not defined yet, refused by the host, or defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatId {
    Undefined,
    Refused,
    Id(u32),
}

/// One worker's view: the buckets and the stat ids it defined.
#[derive(Debug)]
pub struct OperationCounters {
    settings: Settings,
    /// `other`, `anonymous`, `unknown`, then the admitted names as this worker learnt them.
    buckets: Vec<Box<str>>,
    by_name: FastMap<Box<str>, u16>,
    /// The registry holds `top_k` names: every name not in `by_name` is `other`, for good.
    full: bool,
    /// Requests seen per name not admitted yet.
    candidates: FastMap<Box<str>, u32>,
    /// Ids of the counters without reasons, per bucket (see [`OpCounter::plain`]).
    plain: Vec<[StatId; 5]>,
    by_reason: FastMap<(u16, OpCounter, &'static str), StatId>,
    /// Counts not yet added to Envoy's stats: the root's timer adds them, one host call per
    /// series and tick instead of one or two per request.
    pending: Vec<[u64; 5]>,
    pending_by_reason: FastMap<(u16, OpCounter, &'static str), u64>,
}

/// A count to add to Envoy's stats: bucket, counter, reason, amount.
pub type PendingTally = (u16, OpCounter, Option<&'static str>, u64);

impl OperationCounters {
    pub fn new(settings: Settings) -> Self {
        OperationCounters {
            settings,
            buckets: SPECIAL.iter().map(|s| Box::from(*s)).collect(),
            by_name: FastMap::default(),
            full: false,
            candidates: FastMap::default(),
            plain: vec![[StatId::Undefined; 5]; SPECIAL.len()],
            by_reason: FastMap::default(),
            pending: vec![[0; 5]; SPECIAL.len()],
            pending_by_reason: FastMap::default(),
        }
    }

    pub fn on(&self) -> bool {
        self.settings.on()
    }

    /// The bucket `operation` is counted in; may read (and extend) the registry.
    pub fn bucket(&mut self, store: &impl SharedStore, operation: Operation<'_>) -> u16 {
        let name = match operation {
            Operation::Unread => return UNKNOWN,
            Operation::Anonymous => return ANONYMOUS,
            Operation::Named(name) => sanitize(name),
        };
        if let Some(b) = self.by_name.get(name.as_ref()) {
            return *b;
        }
        if self.full || name.is_empty() {
            return OTHER;
        }
        self.admit(store, &name).unwrap_or(OTHER)
    }

    /// Reads the registry for `name` (another worker may have admitted it), and admits it when
    /// this worker has seen it often enough and there is room.
    fn admit(&mut self, store: &impl SharedStore, name: &str) -> Option<u16> {
        for _ in 0..CAS_ATTEMPTS {
            let (value, cas) = store.get_cas(REGISTRY_KEY);
            let value = value.unwrap_or_default();
            self.learn(&value);
            if let Some(b) = self.by_name.get(name) {
                return Some(*b);
            }
            if self.full || !self.seen_enough(name) {
                return None;
            }
            let mut next = value;
            next.extend_from_slice(name.as_bytes());
            next.push(b'\n');
            match store.set_cas(REGISTRY_KEY, &next, Some(cas.unwrap_or(CREATE_CAS))) {
                Ok(()) => {
                    self.candidates.remove(name);
                    self.learn(&next);
                    return self.by_name.get(name).copied();
                }
                Err(StoreError::CasMismatch) => continue,
                Err(StoreError::Failed) => return None,
            }
        }
        None
    }

    /// Counts one request of `name`; whether it has now been seen `min_requests` times.
    fn seen_enough(&mut self, name: &str) -> bool {
        if let Some(n) = self.candidates.get_mut(name) {
            *n += 1;
            return *n >= self.settings.min_requests;
        }
        if self.candidates.len() >= MAX_CANDIDATES {
            self.candidates.clear();
        }
        self.candidates.insert(Box::from(name), 1);
        self.settings.min_requests <= 1
    }

    /// Takes the registry's names in (at most `top_k` of them).
    fn learn(&mut self, registry: &[u8]) {
        for name in decode(registry) {
            if self.by_name.len() >= self.settings.top_k {
                break;
            }
            if self.by_name.contains_key(name) {
                continue;
            }
            let Ok(b) = u16::try_from(self.buckets.len()) else {
                break;
            };
            self.buckets.push(Box::from(name));
            self.plain.push([StatId::Undefined; 5]);
            self.pending.push([0; 5]);
            self.by_name.insert(Box::from(name), b);
        }
        self.full = self.by_name.len() >= self.settings.top_k;
    }

    /// Counts `amount` for `counter` (by `reason`) of `bucket`, to be added at the next flush.
    pub fn add(
        &mut self,
        bucket: u16,
        counter: OpCounter,
        reason: Option<&'static str>,
        amount: u64,
    ) {
        match (counter.plain(), reason) {
            (Some(at), None) => {
                if let Some(p) = self.pending.get_mut(usize::from(bucket)) {
                    p[at] = p[at].saturating_add(amount);
                }
            }
            (_, reason) => {
                let p = self
                    .pending_by_reason
                    .entry((bucket, counter, reason.unwrap_or("-")))
                    .or_default();
                *p = p.saturating_add(amount);
            }
        }
    }

    /// Every count added since the last call (the pending ones are zeroed).
    pub fn take_pending(&mut self) -> Vec<PendingTally> {
        let mut out = Vec::new();
        for (b, counts) in self.pending.iter_mut().enumerate() {
            let Ok(b) = u16::try_from(b) else { break };
            for (at, n) in counts.iter_mut().enumerate() {
                if *n > 0 {
                    out.push((b, OpCounter::PLAIN[at], None, std::mem::take(n)));
                }
            }
        }
        for ((b, counter, reason), n) in self.pending_by_reason.drain() {
            out.push((b, counter, Some(reason), n));
        }
        out
    }

    /// The id of `counter` (by `reason`) for `bucket`, as far as this worker knows.
    pub fn known(&self, bucket: u16, counter: OpCounter, reason: Option<&'static str>) -> StatId {
        match (counter.plain(), reason) {
            (Some(at), None) => self
                .plain
                .get(usize::from(bucket))
                .map_or(StatId::Refused, |ids| ids[at]),
            (_, reason) => self
                .by_reason
                .get(&(bucket, counter, reason.unwrap_or("-")))
                .copied()
                .unwrap_or(StatId::Undefined),
        }
    }

    /// The stat name to define for `counter` of `bucket`.
    pub fn name_of(&self, bucket: u16, counter: OpCounter, reason: Option<&str>) -> String {
        let name = self.buckets.get(usize::from(bucket)).map_or("other", |b| b);
        stat_name(counter, name, reason)
    }

    /// Remembers what defining the stat gave.
    pub fn defined(
        &mut self,
        bucket: u16,
        counter: OpCounter,
        reason: Option<&'static str>,
        id: Option<u32>,
    ) {
        let known = id.map_or(StatId::Refused, StatId::Id);
        match (counter.plain(), reason) {
            (Some(at), None) => {
                if let Some(ids) = self.plain.get_mut(usize::from(bucket)) {
                    ids[at] = known;
                }
            }
            (_, reason) => {
                self.by_reason
                    .insert((bucket, counter, reason.unwrap_or("-")), known);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    fn settings(top_k: usize, min_requests: u32) -> Settings {
        Settings {
            top_k,
            min_requests,
        }
    }

    fn name(s: &OperationCounters, b: u16) -> &str {
        &s.buckets[usize::from(b)]
    }

    #[test]
    fn stat_names_carry_their_tags_in_envoy_s_form() {
        assert_eq!(
            stat_name(OpCounter::Hits, "GetUser", None),
            "graphql_cache.op.hits.graphql_operation=.=GetUser;.;"
        );
        assert_eq!(
            stat_name(OpCounter::Misses, "GetUser", Some("expired")),
            "graphql_cache.op.misses.graphql_operation=.=GetUser;.;graphql_cache_reason=.=expired;.;"
        );
    }

    #[test]
    fn names_are_cut_to_what_a_tag_may_hold() {
        assert_eq!(sanitize("Get_User2"), "Get_User2");
        assert_eq!(sanitize("a;.;b=.=c d"), "abcd");
        assert_eq!(sanitize(&"x".repeat(200)).len(), MAX_NAME);
    }

    #[test]
    fn the_first_k_names_seen_often_enough_get_a_bucket_and_the_rest_are_other() {
        let store = MapStore::default();
        let mut s = OperationCounters::new(settings(2, 2));
        let a = Operation::Named("A");
        assert_eq!(s.bucket(&store, a), OTHER, "seen once");
        let b = s.bucket(&store, a);
        assert_eq!(name(&s, b), "A");
        assert_eq!(s.bucket(&store, a), b);
        for n in ["B", "B"] {
            s.bucket(&store, Operation::Named(n));
        }
        let c = Operation::Named("C");
        for _ in 0..5 {
            assert_eq!(s.bucket(&store, c), OTHER, "no room left");
        }
        assert!(s.full);
        assert_eq!(s.bucket(&store, Operation::Anonymous), ANONYMOUS);
        assert_eq!(s.bucket(&store, Operation::Unread), UNKNOWN);
    }

    #[test]
    fn workers_agree_through_the_registry() {
        let store = MapStore::default();
        let mut one = OperationCounters::new(settings(2, 1));
        let mut two = OperationCounters::new(settings(2, 5));
        let b = one.bucket(&store, Operation::Named("A"));
        assert_eq!(name(&one, b), "A");
        // Admitted elsewhere: counted as itself here at once, whatever this worker saw.
        let b = two.bucket(&store, Operation::Named("A"));
        assert_eq!(name(&two, b), "A");
        one.bucket(&store, Operation::Named("B"));
        assert_eq!(two.bucket(&store, Operation::Named("Z")), OTHER);
        assert!(two.full, "learnt B from the registry: full");
    }

    #[test]
    fn a_registry_longer_than_top_k_is_read_up_to_k() {
        let store = MapStore::default();
        store.set(REGISTRY_KEY, b"A\nB\nC\n").unwrap();
        let mut s = OperationCounters::new(settings(2, 1));
        assert_eq!(s.bucket(&store, Operation::Named("C")), OTHER);
        let b = s.bucket(&store, Operation::Named("B"));
        assert_eq!(name(&s, b), "B");
    }

    #[test]
    fn candidates_stay_bounded() {
        let store = MapStore::default();
        let mut s = OperationCounters::new(settings(10, 3));
        for i in 0..(MAX_CANDIDATES * 3) {
            s.bucket(&store, Operation::Named(&format!("n{i}")));
        }
        assert!(s.candidates.len() <= MAX_CANDIDATES);
        assert_eq!(s.by_name.len(), 0);
    }

    #[test]
    fn counts_wait_for_the_flush_and_are_taken_once() {
        let store = MapStore::default();
        let mut s = OperationCounters::new(settings(2, 1));
        let a = s.bucket(&store, Operation::Named("A"));
        s.add(a, OpCounter::Hits, None, 1);
        s.add(a, OpCounter::Hits, None, 2);
        s.add(a, OpCounter::Misses, Some("cold"), 1);
        s.add(OTHER, OpCounter::OriginMsSaved, None, 40);
        let mut taken = s.take_pending();
        taken.sort_by_key(|p| (p.0, p.1.name()));
        assert_eq!(
            taken,
            vec![
                (OTHER, OpCounter::OriginMsSaved, None, 40),
                (a, OpCounter::Hits, None, 3),
                (a, OpCounter::Misses, Some("cold"), 1),
            ]
        );
        assert!(s.take_pending().is_empty());
    }

    #[test]
    fn ids_are_remembered_per_counter_and_reason() {
        let mut s = OperationCounters::new(settings(2, 1));
        assert_eq!(s.known(OTHER, OpCounter::Hits, None), StatId::Undefined);
        s.defined(OTHER, OpCounter::Hits, None, Some(7));
        s.defined(OTHER, OpCounter::Misses, Some("cold"), None);
        assert_eq!(s.known(OTHER, OpCounter::Hits, None), StatId::Id(7));
        assert_eq!(
            s.known(OTHER, OpCounter::Misses, Some("cold")),
            StatId::Refused
        );
        assert_eq!(
            s.known(OTHER, OpCounter::Misses, Some("expired")),
            StatId::Undefined
        );
        assert_eq!(
            s.name_of(OTHER, OpCounter::Bypasses, Some("mutation")),
            "graphql_cache.op.bypasses.graphql_operation=.=other;.;graphql_cache_reason=.=mutation;.;"
        );
    }
}
