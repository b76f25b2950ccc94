//! The HTTP context: one per request, each callback handed to `crate::worker::exchange`.

use super::envoy::{Envoy, Request};
use super::metrics::Metrics;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::exchange::{Exchange, Flow};
use crate::worker::state::{Plugin, Worker};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::Rc;

pub struct CacheFilter {
    plugin: Rc<Plugin>,
    worker: Rc<RefCell<Worker>>,
    metrics: Rc<Metrics>,
    exchange: Exchange,
}

impl CacheFilter {
    pub fn new(
        plugin: Rc<Plugin>,
        worker: Rc<RefCell<Worker>>,
        metrics: Rc<Metrics>,
        context_id: u32,
    ) -> Self {
        CacheFilter {
            plugin,
            worker,
            metrics,
            exchange: Exchange::new(context_id),
        }
    }

    fn run(
        &mut self,
        step: impl FnOnce(&mut Exchange, &mut Ctx<Envoy<Request>>) -> Flow,
    ) -> Action {
        let host = Envoy::request(&self.metrics);
        let mut cx = Ctx::new(&self.plugin, &self.worker, &host);
        match step(&mut self.exchange, &mut cx) {
            Flow::Continue => Action::Continue,
            Flow::Pause => Action::Pause,
        }
    }
}

impl Drop for CacheFilter {
    fn drop(&mut self) {
        let host = Envoy::request(&self.metrics);
        self.exchange
            .on_done(&mut Ctx::new(&self.plugin, &self.worker, &host));
    }
}

impl Context for CacheFilter {
    /// A callout this request sent (entity mode's partial fetch) came back.
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        self.run(|x, cx| {
            let returned = Returned::read_own(cx.host(), num_headers, body_size);
            x.on_callout(cx, token_id, &returned);
            Flow::Continue
        });
    }
}

impl HttpContext for CacheFilter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.run(|x, cx| x.on_request_headers(cx, end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.run(|x, cx| x.on_request_body(cx, body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        self.run(|x, cx| x.on_request_trailers(cx))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.run(|x, cx| x.on_response_headers(cx, end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.run(|x, cx| x.on_response_body(cx, body_size, end_of_stream))
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.run(|x, cx| x.on_response_trailers(cx))
    }
}
