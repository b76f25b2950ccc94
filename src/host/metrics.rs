//! Counter ids in Envoy's `/stats`, defined once per VM.

use crate::effects::counters::Counter;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// A counter the host refused to define is skipped: losing a statistic must never cost a request.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    ids: [Option<u32>; Counter::ALL.len()],
}

impl Metrics {
    pub fn define() -> Self {
        let mut ids = [None; Counter::ALL.len()];
        for counter in Counter::ALL {
            ids[counter.index()] =
                hostcalls::define_metric(MetricType::Counter, counter.name()).ok();
        }
        Metrics { ids }
    }

    pub fn inc(&self, counter: Counter) {
        if let Some(id) = self.ids[counter.index()] {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}
