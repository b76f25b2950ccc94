//! The root context: one per worker VM. Loads the configuration, owns the worker's state and
//! hands its callbacks (queue, callout answers, timer) to `crate::worker`.

use super::envoy::{dequeue_all, Envoy, Root};
use super::filter::CacheFilter;
use super::metrics::Metrics;
use crate::worker::ctx::Ctx;
use crate::worker::root::callouts::on_callout;
use crate::worker::root::configure::configure;
use crate::worker::root::queue::on_messages;
use crate::worker::root::tick::on_tick;
use crate::worker::state::{Plugin, Worker};
use crate::worker::timer::TICK;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::rc::Rc;

pub struct CacheRoot {
    plugin: Rc<Plugin>,
    worker: Rc<RefCell<Worker>>,
    metrics: Rc<Metrics>,
}

impl CacheRoot {
    pub fn new() -> Self {
        // WASI's random_get seeds RandomState: a per-VM id without a worker-id property.
        let id = RandomState::new().hash_one(0x6771_6c63u64);
        let plugin = Plugin::default();
        let worker = Worker::new(id, &plugin.config);
        CacheRoot {
            plugin: Rc::new(plugin),
            worker: Rc::new(RefCell::new(worker)),
            metrics: Rc::new(Metrics::default()),
        }
    }

    fn host(&self) -> Envoy<'_, Root> {
        Envoy::root(&self.metrics)
    }

    /// Runs `f` with the worker's context, for one callback.
    fn with_cx<'s>(&'s self, f: impl FnOnce(&mut Ctx<'_, Envoy<'s, Root>>)) {
        let host = self.host();
        f(&mut Ctx::new(&self.plugin, &self.worker, &host));
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
        self.with_cx(|cx| on_callout(cx, token_id, num_headers, body_size));
    }
}

impl RootContext for CacheRoot {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = self.get_plugin_configuration().unwrap_or_default();
        self.metrics = Rc::new(Metrics::define());
        match configure(&bytes, &self.worker, &self.host()) {
            Ok(plugin) => self.plugin = Rc::new(plugin),
            Err(_) => return false,
        }
        // The timer also guards against held requests hanging on a misconfigured plugin.
        let _ = hostcalls::set_tick_period(TICK);
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        let messages = dequeue_all(queue_id);
        self.with_cx(|cx| on_messages(cx, &messages));
    }

    fn on_tick(&mut self) {
        self.with_cx(on_tick);
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(CacheFilter::new(
            Rc::clone(&self.plugin),
            Rc::clone(&self.worker),
            Rc::clone(&self.metrics),
            context_id,
        )))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
