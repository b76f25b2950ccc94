//! Counter ids in Envoy's `/stats`, defined once per VM, and the purge signal.

use crate::effects::counters::Counter;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// The purge signal's counter. Envoy's counters are process-wide: every worker's VM defining
/// this name shares one value, read with a plain host call (no copy into the VM, unlike
/// shared data).
const PURGE_SIGNAL: &str = "graphql_cache.purge_signal";

/// A counter the host refused to define is skipped: losing a statistic must never cost a request.
#[derive(Debug, Clone)]
pub struct Metrics {
    ids: [Option<u32>; Counter::ALL.len()],
    signal: Option<u32>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            ids: [None; Counter::ALL.len()],
            signal: None,
        }
    }
}

impl Metrics {
    pub fn define() -> Self {
        let mut ids = [None; Counter::ALL.len()];
        for counter in Counter::ALL {
            ids[counter.index()] =
                hostcalls::define_metric(MetricType::Counter, counter.name()).ok();
        }
        Metrics {
            ids,
            signal: working_signal(),
        }
    }

    pub fn inc(&self, counter: Counter) {
        if let Some(id) = self.ids[counter.index()] {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }

    pub fn add(&self, counter: Counter, n: u64) {
        if let Some(id) = self.ids[counter.index()] {
            let _ = hostcalls::increment_metric(id, i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    pub fn signal(&self) -> Option<u64> {
        hostcalls::get_metric(self.signal?).ok()
    }

    pub fn raise_signal(&self) {
        if let Some(id) = self.signal {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}

/// The signal's counter, if it really counts: a stats matcher that rejects the name gives a
/// null counter that always reads 0 (a purge would go unseen), so it must move when raised.
/// Raising it here is harmless: any move only makes every worker reread the marks once.
fn working_signal() -> Option<u32> {
    let id = hostcalls::define_metric(MetricType::Counter, PURGE_SIGNAL).ok()?;
    let before = hostcalls::get_metric(id).ok()?;
    hostcalls::increment_metric(id, 1).ok()?;
    let after = hostcalls::get_metric(id).ok()?;
    (after > before).then_some(id)
}
