//! The floor under `make bench`'s `ttl10`: what any proxy-wasm cache hit must pay. It reads the
//! request headers and body as the cache does, and answers a fixed local reply (the plugin
//! configuration is the answer's body, so it has the cached answer's size), with no key, no
//! lookup and no state.
//!
//! With a VM configuration naming a host call (`make bench-hostcalls`), it also makes that call
//! ten times per request after reading the body: what one such call costs, measured against the
//! plain floor in the same run.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MapType, MetricType};
use std::hint::black_box;
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(FloorRoot { answer: Rc::new(Vec::new()), extra: Extra::None })
    });
}}

struct FloorRoot {
    answer: Rc<Vec<u8>>,
    extra: Extra,
}

/// A host call made `REPEAT` times per request, on top of the floor's work.
#[derive(Clone, Copy)]
enum Extra {
    None,
    Property,
    Header,
    Headers,
    SharedData,
    Clock,
    MetricRead(u32),
    MetricIncrement(u32),
    /// Not a repeated call: once per request, what a correct cache's hit adds to the floor
    /// whatever its store: the route's cluster (the key must not mix routes), the clock, and an
    /// `age` header (RFC 9111 section 4). Its ratio to the floor bounds any cache's.
    CacheMinimum,
}

const REPEAT: usize = 10;
const SHARED_KEY: &str = "wasm_floor.epoch";

impl Extra {
    fn parse(name: &[u8]) -> Option<Extra> {
        let metric = || hostcalls::define_metric(MetricType::Counter, "wasm_floor.calls").ok();
        Some(match name {
            b"" => Extra::None,
            b"property" => Extra::Property,
            b"header" => Extra::Header,
            b"headers" => Extra::Headers,
            b"shared_data" => {
                let _ = hostcalls::set_shared_data(SHARED_KEY, Some(&7u64.to_le_bytes()), None);
                Extra::SharedData
            }
            b"clock" => Extra::Clock,
            b"metric_read" => Extra::MetricRead(metric()?),
            b"metric_increment" => Extra::MetricIncrement(metric()?),
            b"cache_minimum" => Extra::CacheMinimum,
            _ => return None,
        })
    }

    fn run(self) {
        for _ in 0..REPEAT {
            match self {
                Extra::None | Extra::CacheMinimum => return,
                Extra::Property => {
                    black_box(hostcalls::get_property(vec!["xds", "cluster_name"]).ok());
                }
                Extra::Header => {
                    black_box(
                        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, ":path").ok(),
                    );
                }
                Extra::Headers => {
                    black_box(hostcalls::get_map_bytes(MapType::HttpRequestHeaders).ok());
                }
                Extra::SharedData => {
                    black_box(hostcalls::get_shared_data(SHARED_KEY).ok());
                }
                Extra::Clock => {
                    black_box(hostcalls::get_current_time().ok());
                }
                Extra::MetricRead(id) => {
                    black_box(hostcalls::get_metric(id).ok());
                }
                Extra::MetricIncrement(id) => {
                    let _ = hostcalls::increment_metric(id, 1);
                }
            }
        }
    }
}

impl Context for FloorRoot {}

impl RootContext for FloorRoot {
    fn on_vm_start(&mut self, _size: usize) -> bool {
        let name = self.get_vm_configuration().unwrap_or_default();
        match Extra::parse(&name) {
            Some(extra) => {
                self.extra = extra;
                true
            }
            None => false,
        }
    }

    fn on_configure(&mut self, _size: usize) -> bool {
        self.answer = Rc::new(self.get_plugin_configuration().unwrap_or_default());
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Floor {
            answer: Rc::clone(&self.answer),
            extra: self.extra,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Floor {
    answer: Rc<Vec<u8>>,
    extra: Extra,
}

impl Floor {
    fn reply(&self) -> Action {
        let mut headers = vec![("content-type", "application/json"), ("x-cache", "FLOOR")];
        if let Extra::CacheMinimum = self.extra {
            black_box(hostcalls::get_property(vec!["xds", "cluster_name"]).ok());
            let now = hostcalls::get_current_time().ok();
            headers.push(("age", if black_box(now).is_some() { "0" } else { "1" }));
        }
        self.send_http_response(200, headers, Some(&self.answer));
        Action::Pause
    }
}

impl Context for Floor {}

impl HttpContext for Floor {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // What the cache reads of every request before it can decide.
        let headers = self.get_http_request_headers_bytes();
        black_box(&headers);
        if end_of_stream {
            return self.reply();
        }
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, body_size);
        black_box(&body);
        self.extra.run();
        self.reply()
    }
}
