//! The root context: parses the configuration once, owns this worker's wake-up queue and timer,
//! and runs the shared fetches (see `worker`).

use super::filter::CacheFilter;
use super::metrics::Metrics;
use super::shared::EnvoySharedData;
use super::worker::{self, SharedWorker, Worker};
use crate::bypass::Bypass;
use crate::classify::Decided;
use crate::coalesce::FlightTable;
use crate::config::Config;
use crate::hot::HotCache;
use crate::memo::Memo;
use crate::store::SlotTable;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::rc::Rc;

/// Requests larger than this are classified every time rather than memoized, which bounds the
/// memo at `key_memo_entries` x 8 KiB per worker.
const MEMO_MAX_INPUT: usize = 8 * 1024;

/// Everything a request needs that is fixed at configuration time.
pub struct Plugin {
    pub config: Config,
    pub table: SlotTable,
    pub flights: FlightTable,
    pub metrics: Metrics,
    /// Raw request bytes to classification, per worker; reset with the configuration it used.
    pub memo: RefCell<Memo<Result<Decided, Bypass>>>,
    /// Recently served entries, per worker, in front of shared data.
    pub hot: RefCell<HotCache>,
}

impl Plugin {
    fn new(config: Config, metrics: Metrics) -> Plugin {
        Plugin {
            table: SlotTable::new(config.cache_slots),
            flights: FlightTable::new(config.flight_slots),
            memo: RefCell::new(Memo::new(config.key_memo_entries, MEMO_MAX_INPUT)),
            hot: RefCell::new(HotCache::new(config.local_cache_bytes)),
            config,
            metrics,
        }
    }
}

pub struct CacheRoot {
    plugin: Rc<Plugin>,
    worker: SharedWorker,
}

impl CacheRoot {
    pub fn new() -> Self {
        // WASI's random_get seeds RandomState: a per-VM id without a worker-id property.
        let id = RandomState::new().hash_one(0x6771_6c63u64);
        CacheRoot {
            plugin: Rc::new(Plugin::new(Config::default(), Metrics::default())),
            worker: Rc::new(RefCell::new(Worker {
                id,
                ..Worker::default()
            })),
        }
    }

    fn ensure_queue(&self) {
        if self.worker.borrow().queue.is_some() {
            return;
        }
        let name = format!("graphql-cache/wake/{:016x}", self.worker.borrow().id);
        match hostcalls::register_shared_queue(&name) {
            Ok(token) => self.worker.borrow_mut().queue = Some(token),
            Err(_) => {
                let _ = hostcalls::log(
                    LogLevel::Warn,
                    "graphql-cache: no wake-up queue; coalescing off",
                );
            }
        }
    }
}

impl Context for CacheRoot {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        worker::on_fetch_response(&self.plugin, &self.worker, token_id, num_headers, body_size);
    }
}

impl RootContext for CacheRoot {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = self.get_plugin_configuration().unwrap_or_default();
        let config = match Config::parse(&bytes) {
            Ok(config) => config,
            Err(e) => {
                let _ = hostcalls::log(LogLevel::Error, &format!("graphql-cache: {e}"));
                return false;
            }
        };
        let coalesce = config.coalesce;
        self.plugin = Rc::new(Plugin::new(config, Metrics::define()));
        if coalesce {
            self.ensure_queue();
            self.plugin.flights.precreate(&EnvoySharedData);
        }
        // The timer also guards against held requests hanging on a misconfigured plugin.
        let _ = hostcalls::set_tick_period(worker::TICK);
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        worker::on_queue_ready(&self.plugin, &self.worker, queue_id);
    }

    fn on_tick(&mut self) {
        worker::on_tick(&self.plugin, &self.worker);
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(CacheFilter::new(
            Rc::clone(&self.plugin),
            Rc::clone(&self.worker),
            context_id,
        )))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
