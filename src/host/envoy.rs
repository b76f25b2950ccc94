//! The effects over proxy-wasm host calls. Every call acts on the current (or effective) context,
//! so one implementation serves the root and the HTTP contexts.

use super::metrics::Metrics;
use crate::effects::counters::Counter;
use crate::effects::header_block::HeaderBlock;
use crate::effects::host::{
    Callout, Declined, Host, LogLevel, RequestHost, RootHost, Unserializable,
};
use crate::effects::store::{SharedStore, StoreError};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, MetricType, Status};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::time::{Duration, UNIX_EPOCH};

/// The access-log record's filter-state name, less Envoy's `wasm.` prefix.
const LOG_PROPERTY: &str = "graphql_cache";

/// The host as one side of the VM sees it: [`Root`] for the root context's callbacks,
/// [`Request`] for an HTTP context's (see `effects::host::RootHost`).
pub struct Envoy<'a, Side> {
    metrics: &'a Metrics,
    side: PhantomData<Side>,
}

/// The root context's side.
pub struct Root;
/// An HTTP context's side.
pub struct Request;

impl<'a> Envoy<'a, Root> {
    pub fn root(metrics: &'a Metrics) -> Self {
        Envoy {
            metrics,
            side: PhantomData,
        }
    }
}

impl<'a> Envoy<'a, Request> {
    pub fn request(metrics: &'a Metrics) -> Self {
        Envoy {
            metrics,
            side: PhantomData,
        }
    }
}

fn dispatch(request: &Callout, timeout_ms: u64) -> Result<u32, Declined> {
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    hostcalls::dispatch_http_call(
        &request.cluster,
        headers,
        request.body.as_deref(),
        vec![],
        Duration::from_millis(timeout_ms),
    )
    .map_err(|_| Declined)
}

fn callout_headers() -> Vec<(String, Vec<u8>)> {
    hostcalls::get_map_bytes(MapType::HttpCallResponseHeaders).unwrap_or_default()
}

fn callout_body(size: usize) -> Option<Vec<u8>> {
    hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, size)
        .ok()
        .flatten()
}

impl<S> SharedStore for Envoy<'_, S> {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        hostcalls::set_shared_data(key, Some(value), cas).map_err(|status| match status {
            Status::CasMismatch => StoreError::CasMismatch,
            _ => StoreError::Failed,
        })
    }
}

impl<S> Host for Envoy<'_, S> {
    fn now_us(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_micros() as u64)
            .unwrap_or_default()
    }

    fn random_u64(&self) -> u64 {
        // WASI's random_get seeds RandomState; each instance is keyed anew.
        RandomState::new().hash_one(0x736c_6f74u64)
    }

    fn count(&self, counter: Counter) {
        self.metrics.inc(counter);
    }

    fn count_n(&self, counter: Counter, n: u64) {
        self.metrics.add(counter, n);
    }

    fn define_counter(&self, name: &str) -> Option<u32> {
        hostcalls::define_metric(MetricType::Counter, name).ok()
    }

    fn add_to_counter(&self, id: u32, n: u64) {
        let _ = hostcalls::increment_metric(id, i64::try_from(n).unwrap_or(i64::MAX));
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn log(&self, level: LogLevel, message: &str) {
        let level = match level {
            LogLevel::Warn => proxy_wasm::types::LogLevel::Warn,
            LogLevel::Error => proxy_wasm::types::LogLevel::Error,
        };
        let _ = hostcalls::log(level, message);
    }

    fn register_queue(&self, name: &str) -> Option<u32> {
        hostcalls::register_shared_queue(name).ok()
    }

    fn enqueue(&self, queue: u32, message: &[u8]) -> bool {
        hostcalls::enqueue_shared_queue(queue, Some(message)).is_ok()
    }

    fn set_tick_ms(&self, period_ms: u64) -> bool {
        hostcalls::set_tick_period(Duration::from_millis(period_ms)).is_ok()
    }

    fn purge_signal(&self) -> Option<u64> {
        self.metrics.signal()
    }

    fn raise_purge_signal(&self) {
        self.metrics.raise_signal();
    }
}

impl RootHost for Envoy<'_, Root> {
    fn dispatch(&self, request: &Callout, timeout_ms: u64) -> Result<u32, Declined> {
        dispatch(request, timeout_ms)
    }

    fn callout_headers(&self) -> Vec<(String, Vec<u8>)> {
        callout_headers()
    }

    fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
        callout_body(size)
    }

    fn answer(&self, context: u32, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) -> bool {
        if hostcalls::set_effective_context(context).is_err() {
            return false;
        }
        let _ = hostcalls::send_http_response(u32::from(status), headers, Some(body));
        true
    }

    fn resume(&self, context: u32) -> bool {
        if hostcalls::set_effective_context(context).is_err() {
            return false;
        }
        let _ = hostcalls::resume_http_request();
        true
    }
}

impl RequestHost for Envoy<'_, Request> {
    fn dispatch_own(&self, request: &Callout, timeout_ms: u64) -> Result<u32, Declined> {
        dispatch(request, timeout_ms)
    }

    fn own_callout_body(&self, size: usize) -> Option<Vec<u8>> {
        callout_body(size)
    }

    fn own_callout_headers(&self) -> Vec<(String, Vec<u8>)> {
        callout_headers()
    }

    fn resume_self(&self, _me: u32) {
        let _ = hostcalls::resume_http_request();
    }

    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
    }

    fn request_headers(&self) -> HeaderBlock {
        // A map the host could not hand over, or one not in its format, reads as no headers:
        // such a request is not handled and goes upstream untouched.
        header_map(MapType::HttpRequestHeaders)
            .and_then(HeaderBlock::parse)
            .unwrap_or_default()
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpRequestBody, 0, size)
            .ok()
            .flatten()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    fn property_or_error(&self, path: &[&str]) -> Result<Option<Vec<u8>>, Unserializable> {
        hostcalls::get_property(path.to_vec()).map_err(|_| Unserializable)
    }

    fn set_request_header(&self, name: &str, value: &str) {
        let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, Some(value));
    }

    fn respond(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
        let _ = hostcalls::send_http_response(u32::from(status), headers, Some(body));
    }

    fn set_log_record(&self, record: &str) {
        // Envoy keeps it as filter state `wasm.graphql_cache` (set_property prefixes `wasm.`).
        let _ = hostcalls::set_property(vec![LOG_PROPERTY], Some(record.as_bytes()));
    }

    fn set_response_header(&self, name: &str, value: &str) {
        let _ = hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value));
    }

    fn response_headers(&self) -> Vec<(String, Vec<u8>)> {
        hostcalls::get_map_bytes(MapType::HttpResponseHeaders).unwrap_or_default()
    }

    fn response_body(&self, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpResponseBody, 0, size)
            .ok()
            .flatten()
    }
}

/// A header map as the host serializes it, taken as it is (the SDK's readers copy each header).
fn header_map(map: MapType) -> Option<Vec<u8>> {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: on success the host has written a buffer it allocated through the SDK's
    // `proxy_on_memory_allocate` (a boxed `[u8]` of exactly `size` bytes, leaked), which is taken
    // back here once, as the SDK's own `get_map_bytes` does.
    unsafe {
        if abi::proxy_get_header_map_pairs(map as u32, &mut data, &mut size) != 0 {
            return None;
        }
        if data.is_null() {
            return Some(Vec::new());
        }
        Some(Vec::from_raw_parts(data, size, size))
    }
}

mod abi {
    #[link(wasm_import_module = "env")]
    extern "C" {
        /// proxy-wasm ABI 0.2.1; status 0 is `Ok`.
        pub fn proxy_get_header_map_pairs(
            map_type: u32,
            return_map_data: *mut *mut u8,
            return_map_size: *mut usize,
        ) -> u32;
    }
}

/// Every message waiting on this worker's queue.
pub fn dequeue_all(queue: u32) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    while let Ok(Some(message)) = hostcalls::dequeue_shared_queue(queue) {
        messages.push(message);
    }
    messages
}
