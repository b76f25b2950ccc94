//! The root context: parses the configuration once and hands each request a shared, immutable
//! view of it.

use super::filter::CacheFilter;
use super::metrics::Metrics;
use crate::config::Config;
use crate::store::SlotTable;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::rc::Rc;

/// Everything a request needs that is fixed at configuration time.
pub struct Plugin {
    pub config: Config,
    pub table: SlotTable,
    pub metrics: Metrics,
}

pub struct CacheRoot {
    plugin: Rc<Plugin>,
}

impl CacheRoot {
    pub fn new() -> Self {
        let config = Config::default();
        CacheRoot {
            plugin: Rc::new(Plugin {
                table: SlotTable::new(config.cache_slots),
                config,
                metrics: Metrics::default(),
            }),
        }
    }
}

impl Context for CacheRoot {}

impl RootContext for CacheRoot {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = self.get_plugin_configuration().unwrap_or_default();
        match Config::parse(&bytes) {
            Ok(config) => {
                self.plugin = Rc::new(Plugin {
                    table: SlotTable::new(config.cache_slots),
                    config,
                    metrics: Metrics::define(),
                });
                true
            }
            Err(e) => {
                let _ = hostcalls::log(LogLevel::Error, &format!("graphql-cache: {e}"));
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(CacheFilter::new(Rc::clone(&self.plugin))))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
