//! Counters in Envoy's `/stats`, shown as `wasmcustom.graphql_cache.<name>`.

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Hits,
    Misses,
    Bypasses,
    RejectedInputs,
    Stores,
    StoreSkipped,
    StoreFailures,
    Evictions,
    Coalesced,
    Leaders,
    WaitTimeouts,
    FetchFailures,
    LateWakeups,
}

const ALL: [(Counter, &str); 13] = [
    (Counter::Hits, "graphql_cache.hits"),
    (Counter::Misses, "graphql_cache.misses"),
    (Counter::Bypasses, "graphql_cache.bypasses"),
    (Counter::RejectedInputs, "graphql_cache.rejected_inputs"),
    (Counter::Stores, "graphql_cache.stores"),
    (Counter::StoreSkipped, "graphql_cache.store_skipped"),
    (Counter::StoreFailures, "graphql_cache.store_failures"),
    (Counter::Evictions, "graphql_cache.evictions"),
    (Counter::Coalesced, "graphql_cache.coalesced"),
    (Counter::Leaders, "graphql_cache.leaders"),
    (Counter::WaitTimeouts, "graphql_cache.wait_timeouts"),
    (Counter::FetchFailures, "graphql_cache.fetch_failures"),
    (Counter::LateWakeups, "graphql_cache.late_wakeups"),
];

/// Metric ids, defined once per VM. A counter the host refused to define is silently skipped:
/// losing a statistic must never cost a request.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    ids: [Option<u32>; ALL.len()],
}

impl Metrics {
    pub fn define() -> Self {
        let mut ids = [None; ALL.len()];
        for (i, (_, name)) in ALL.iter().enumerate() {
            ids[i] = hostcalls::define_metric(MetricType::Counter, name).ok();
        }
        Metrics { ids }
    }

    pub fn inc(&self, counter: Counter) {
        let index = ALL.iter().position(|(c, _)| *c == counter);
        if let Some(id) = index.and_then(|i| self.ids[i]) {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}
