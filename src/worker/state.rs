//! The two kinds of state a worker has: [`Plugin`], fixed when the configuration is loaded and
//! shared read-only by every context of the VM, and [`Worker`], everything that changes while
//! requests run, in one place (shared by the root and HTTP contexts through a `RefCell`).

use crate::cache::fates::Fates;
use crate::cache::hot::HotCache;
use crate::cache::table::{Layout, Seen, SetTable};
use crate::coalesce::flights::FlightTable;
use crate::config::Config;
use crate::effects::operation_stats::OperationCounters;
use crate::entities::batch::WaitedBatches;
use crate::entities::deferred::DeferredSplits;
use crate::entities::prefetch::Prefetches;
use crate::entities::request::Shapes;
use crate::fast_hash::FastSet;
use crate::fleet::calls::L2Calls;
use crate::fleet::commits::HeldPurges;
use crate::invalidate::marks::Target;
use crate::invalidate::marks::{PurgeTable, PurgeView};
use crate::invalidate::mutation::PurgeBudget;
use crate::request::apq::ApqTable;
use crate::request::classify::{Bypassed, Decided};
use crate::request::key::{CacheKey, SlotKey};
use crate::request::memo::Memo;
use crate::request::operations::Operations;
use crate::whatif::ring::Ring;
use crate::worker::flights::Flights;
use crate::worker::watchdog::BodyWatchdog;

/// Requests larger than this are classified every time rather than memoized, which bounds the
/// memo at `key_memo_entries` x 8 KiB per worker.
const MEMO_MAX_INPUT: usize = 8 * 1024;
/// Operations a worker keeps canonical (a gateway's query plans, a client's operations).
const OPERATIONS_KEPT: usize = 256;
/// Keys remembered as answering too large to share.
const TOO_LARGE_KEPT: usize = 1024;
/// Mutation purges a worker keeps for retrying at most.
pub const OWED_PURGES: usize = 64;
/// A flight's lease outlives its fetch timeout by this much before it counts as lost.
pub const LEASE_GRACE_MS: u64 = 2000;

/// Everything fixed at configuration time.
#[derive(Debug)]
pub struct Plugin {
    pub config: Config,
    pub table: SetTable,
    pub flights: FlightTable,
    pub purges: PurgeTable,
    pub apq: ApqTable,
    pub fates: Fates,
}

impl Plugin {
    pub fn new(config: Config, secret: SlotKey) -> Plugin {
        Plugin {
            table: SetTable::new(layout(&config), secret),
            flights: FlightTable::new(config.flight_slots, secret),
            purges: PurgeTable::new(config.tag_slots),
            apq: ApqTable::new(config.apq_slots, config.max_body_bytes, secret),
            fates: Fates::new(config.miss_reason_keys),
            config,
        }
    }

    /// How long a flight's leader may take before another worker may take over.
    pub fn lease_ms(&self) -> u64 {
        let l2 = self.config.l2.as_ref().map_or(0, |l2| l2.budget_ms());
        self.config
            .fetch_timeout_ms
            .saturating_add(LEASE_GRACE_MS)
            .saturating_add(l2)
    }
}

/// The memo of operations a configuration asks for: off with the key memo.
fn operations_read(config: &Config) -> Operations {
    Operations::new(config.key_memo_entries.min(OPERATIONS_KEPT), MEMO_MAX_INPUT)
}

/// The shared table's shape a configuration asks for.
pub fn layout(config: &Config) -> Layout {
    Layout::new(config.cache_slots, config.cache_bytes)
}

impl Default for Plugin {
    fn default() -> Self {
        Plugin::new(Config::default(), SlotKey::default())
    }
}

/// One worker's mutable state.
#[derive(Debug)]
pub struct Worker {
    /// Random per VM: owner id in flight records.
    pub id: u64,
    /// This worker's wake-up queue token (`None`: no queue, so no coalescing).
    pub queue: Option<u32>,
    /// Its flights: who waits, what is queued and sent, how each paused request was let go.
    pub flights: Flights,
    pub watchdog: BodyWatchdog,
    /// Raw request bytes to classification.
    pub memo: Memo<Result<Decided, Bypassed>>,
    /// Canonical operations by text and name: the memo above misses whenever the variables
    /// change. Off with it (`key_memo_entries: 0`); at most 256 texts of 8 KiB.
    pub operations_read: Operations,
    /// Recently served entries, in front of shared data, each checked against the purge marks
    /// of some epoch (checked again once the epoch moves).
    pub hot: HotCache,
    /// How often keys were asked for here lately, and where in the table each was last found.
    pub seen: Seen,
    /// The purge marks as last read.
    pub purges: PurgeView,
    /// Held purge requests: the body watchdog answers these rather than let them go upstream.
    pub held_purges: FastSet<u32>,
    /// When this worker last wrote its heartbeat (0: never).
    pub last_beat_ms: u64,
    /// Keys whose shared fetch answered over `max_entry_bytes`: their next misses go upstream
    /// alone (streamed by the router) instead of fetching it twice.
    pub too_large: BoundedSet,
    /// Calls outstanding with the fleet's L2, writes queued for it, the purge feed's place.
    pub l2: L2Calls,
    /// What is left of this worker's mutation purges before they collapse. Per worker: sharing
    /// it would cost every mutation a compare-and-swap in shared data, and the point is a bound
    /// (an Envoy's is the worker count times the rate), not a precise one.
    pub mutation_budget: PurgeBudget,
    /// Mutation purges that could not be applied yet (shared data refused the write), each at
    /// its instant: the root applies them on its next tick. At most [`OWED_PURGES`]; past it they
    /// merge into one purge of everything at the latest instant.
    pub owed_purges: Vec<(u64, Vec<(Target, bool)>)>,
    /// Purge API requests waiting (`?wait_ms=`) for the fleet's log to hold their purge.
    pub held_commits: HeldPurges,
    /// Which operation names have their own counters, and the ids of those defined here.
    pub operations: OperationCounters,
    /// Entity mode: the `_entities` fields of the query texts read lately.
    pub entity_shapes: Shapes,
    /// Entity mode: the batches this worker's requests wait on (for stale-if-error per entity).
    pub entity_batches: WaitedBatches,
    /// Entity mode: root-fetched answers already relayed, their entities still to be stored.
    pub deferred_splits: DeferredSplits,
    /// Entity mode: what the gateway's batches taught, and the batches waiting for prefetches.
    pub prefetch: Prefetches,
    /// The root's timer is set to fire soon, for the held answers (see `timer`).
    pub quick_tick: bool,
    /// When the root's timer last did its periodic work.
    pub last_housekeeping_ms: u64,
    /// Recent lookups and origin answers, for the what-if route (`serving::recent`).
    pub recent: Ring,
}

/// The what-if ring a configuration asks for: none without the admin routes.
fn recent(config: &Config) -> Ring {
    let records = match config.what_if_on() {
        true => config.what_if_records as usize,
        false => 0,
    };
    Ring::new(records)
}

/// At most `capacity` keys, the oldest forgotten first.
#[derive(Debug, Default)]
pub struct BoundedSet {
    capacity: usize,
    keys: FastSet<CacheKey>,
    order: std::collections::VecDeque<CacheKey>,
}

impl BoundedSet {
    pub fn new(capacity: usize) -> Self {
        BoundedSet {
            capacity,
            ..BoundedSet::default()
        }
    }

    pub fn insert(&mut self, key: CacheKey) {
        if self.capacity == 0 || !self.keys.insert(key) {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }

    pub fn contains(&self, key: &CacheKey) -> bool {
        self.keys.contains(key)
    }
}

impl Worker {
    pub fn new(id: u64, config: &Config) -> Worker {
        Worker {
            id,
            queue: None,
            flights: Flights::default(),
            watchdog: BodyWatchdog::default(),
            memo: Memo::new(config.key_memo_entries, MEMO_MAX_INPUT),
            operations_read: operations_read(config),
            hot: HotCache::new(config.local_cache_bytes),
            seen: Seen::new(&layout(config)),
            purges: PurgeView::default(),
            held_purges: FastSet::default(),
            last_beat_ms: 0,
            too_large: BoundedSet::new(TOO_LARGE_KEPT),
            l2: L2Calls::default(),
            mutation_budget: PurgeBudget::new(&config.mutation_purges),
            owed_purges: Vec::new(),
            held_commits: HeldPurges::default(),
            operations: OperationCounters::new(config.operation_stats),
            entity_shapes: Shapes::default(),
            entity_batches: WaitedBatches::default(),
            deferred_splits: DeferredSplits::default(),
            prefetch: Prefetches::default(),
            quick_tick: false,
            last_housekeeping_ms: 0,
            recent: recent(config),
        }
    }

    /// A new configuration: what was derived from the old one goes (keys may differ now).
    pub fn reconfigure(&mut self, config: &Config) {
        self.memo = Memo::new(config.key_memo_entries, MEMO_MAX_INPUT);
        self.operations_read = operations_read(config);
        self.hot = HotCache::new(config.local_cache_bytes);
        self.seen = Seen::new(&layout(config));
        self.purges = PurgeView::default();
        self.mutation_budget = PurgeBudget::new(&config.mutation_purges);
        self.operations = OperationCounters::new(config.operation_stats);
        self.entity_shapes = Shapes::default();
        self.prefetch.forget_templates();
        self.recent = recent(config);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flight_s_lease_covers_its_l2_calls_too() {
        let with_l2 = Config::parse(
            br#"{"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#,
        )
        .unwrap();
        let plugin = Plugin::new(with_l2, SlotKey::default());
        assert_eq!(plugin.lease_ms(), 10_000 + LEASE_GRACE_MS + 2_100);
        assert_eq!(Plugin::default().lease_ms(), 10_000 + LEASE_GRACE_MS);
    }

    #[test]
    fn a_bounded_set_forgets_the_oldest() {
        let mut s = BoundedSet::new(2);
        let k = |n| CacheKey { digest: [n; 32] };
        s.insert(k(1));
        s.insert(k(2));
        s.insert(k(1));
        s.insert(k(3));
        assert!(!s.contains(&k(1)) && s.contains(&k(2)) && s.contains(&k(3)));
        let mut off = BoundedSet::new(0);
        off.insert(k(1));
        assert!(!off.contains(&k(1)));
    }
}
