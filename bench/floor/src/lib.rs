//! The floor under `make bench`'s `ttl10`: what any proxy-wasm cache hit must pay. It reads the
//! request headers and body as the cache does, and answers a fixed local reply (the plugin
//! configuration is the answer's body, so it has the cached answer's size), with no key, no
//! lookup and no state.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(FloorRoot { answer: Rc::new(Vec::new()) })
    });
}}

struct FloorRoot {
    answer: Rc<Vec<u8>>,
}

impl Context for FloorRoot {}

impl RootContext for FloorRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        self.answer = Rc::new(self.get_plugin_configuration().unwrap_or_default());
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Floor {
            answer: Rc::clone(&self.answer),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Floor {
    answer: Rc<Vec<u8>>,
}

impl Floor {
    fn reply(&self) -> Action {
        self.send_http_response(
            200,
            vec![("content-type", "application/json"), ("x-cache", "FLOOR")],
            Some(&self.answer),
        );
        Action::Pause
    }
}

impl Context for Floor {}

impl HttpContext for Floor {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        // What the cache reads of every request before it can decide.
        let headers = self.get_http_request_headers_bytes();
        std::hint::black_box(&headers);
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
        std::hint::black_box(&body);
        self.reply()
    }
}
