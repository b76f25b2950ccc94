//! The per-request HTTP context: reads the request, serves hits, and captures cacheable misses.

use super::metrics::Counter;
use super::root::Plugin;
use super::shared::EnvoySharedData;
use crate::bypass::Bypass;
use crate::classify::{classify_body, classify_headers, HeadersVerdict, RequestHead};
use crate::entry::Entry;
use crate::key::CacheKey;
use crate::policy::{body_storable, response_ttl, NotStored, STORED_HEADERS};
use crate::store::Lookup;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;
use std::time::UNIX_EPOCH;

const CACHE_HEADER: &str = "x-cache";
const KEY_HEADER: &str = "x-cache-key";
const REASON_HEADER: &str = "x-cache-reason";

enum State {
    /// Not a request this filter handles: no header, no counting.
    Ignored,
    Bypassed(Bypass),
    AwaitingBody(RequestHead),
    /// Sent upstream; the answer is stored if it qualifies.
    Missed {
        key: CacheKey,
        capture: Option<Capture>,
    },
    /// Answered from the cache; the response callbacks must leave it alone.
    Served,
}

/// A response being copied for the cache as it streams to the client.
struct Capture {
    expires_in_ms: u64,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

pub struct CacheFilter {
    plugin: Rc<Plugin>,
    state: State,
}

impl CacheFilter {
    pub fn new(plugin: Rc<Plugin>) -> Self {
        CacheFilter {
            plugin,
            state: State::Ignored,
        }
    }

    fn now_ms(&self) -> u64 {
        self.get_current_time()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default()
    }

    fn read_head(&self) -> RequestHead {
        let vary_names = &self.plugin.config.vary_headers;
        let mut head = RequestHead {
            vary: vec![None; vary_names.len()],
            ..RequestHead::default()
        };
        for (name, value) in self.get_http_request_headers_bytes() {
            match name.as_str() {
                ":method" => head.method = value,
                ":path" => head.path = value,
                ":authority" => head.authority = value,
                "content-type" => head.content_type = Some(value),
                "content-encoding" => head.content_encoding = Some(value),
                "content-length" => head.content_length = Some(value),
                "accept" => head.accept = Some(value),
                "accept-encoding" => head.accept_encoding = Some(value),
                other => {
                    if let Some(i) = vary_names.iter().position(|v| v == other) {
                        // Repeated headers are joined, so every value is part of the key.
                        match &mut head.vary[i] {
                            Some(existing) => {
                                existing.push(b',');
                                existing.extend_from_slice(&value);
                            }
                            slot => *slot = Some(value),
                        }
                    }
                }
            }
        }
        head
    }

    fn bypass(&mut self, reason: Bypass) -> Action {
        let metrics = &self.plugin.metrics;
        metrics.inc(Counter::Bypasses);
        if reason.is_rejected_input() {
            metrics.inc(Counter::RejectedInputs);
        }
        self.state = State::Bypassed(reason);
        Action::Continue
    }

    /// Serves the key from the cache, or lets the request go upstream as a miss.
    fn lookup(&mut self, key: CacheKey) -> Action {
        let now = self.now_ms();
        if let Lookup::Hit(bytes) = self.plugin.table.lookup(&EnvoySharedData, &key, now) {
            if self.serve(&bytes, &key, now) {
                self.plugin.metrics.inc(Counter::Hits);
                self.state = State::Served;
                return Action::Pause;
            }
        }
        self.plugin.metrics.inc(Counter::Misses);
        self.state = State::Missed { key, capture: None };
        Action::Continue
    }

    fn serve(&self, bytes: &[u8], key: &CacheKey, now: u64) -> bool {
        let Ok(entry) = Entry::decode(bytes) else {
            return false;
        };
        let age = (now.saturating_sub(entry.stored_at_ms) / 1000).to_string();
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(entry.headers.len() + 4);
        headers.extend(entry.headers.iter().copied());
        headers.push(("age", &age));
        headers.push((CACHE_HEADER, "HIT"));
        let hex;
        if self.plugin.config.debug_headers {
            hex = key.hex();
            headers.push((KEY_HEADER, &hex));
        }
        self.send_http_response(u32::from(entry.status), headers, Some(entry.body));
        true
    }

    /// Decides at response-header time whether the answer may be stored, and starts copying it.
    fn start_capture(&self, end_of_stream: bool) -> Result<Capture, NotStored> {
        let headers = self.get_http_response_headers_bytes();
        let status = headers
            .iter()
            .find(|(n, _)| n == ":status")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .unwrap_or(0);
        let config = &self.plugin.config;
        let ttl = response_ttl(
            u32::from(status),
            headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
            &config.vary_headers,
            config.ttl_seconds,
        )?;
        if end_of_stream {
            return Err(NotStored::NotJson);
        }
        let mut stored = Vec::new();
        for (name, value) in headers {
            if STORED_HEADERS.contains(&name.as_str()) {
                let value = String::from_utf8(value).map_err(|_| NotStored::NonUtf8Header)?;
                stored.push((name, value));
            }
        }
        Ok(Capture {
            expires_in_ms: ttl.saturating_mul(1000),
            status,
            headers: stored,
            body: Vec::new(),
        })
    }

    fn finish_capture(&self, key: &CacheKey, capture: Capture) -> Result<(), NotStored> {
        body_storable(&capture.body)?;
        let now = self.now_ms();
        let entry = Entry {
            digest: key.digest,
            stored_at_ms: now,
            expires_at_ms: now.saturating_add(capture.expires_in_ms),
            status: capture.status,
            headers: capture
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            body: &capture.body,
        };
        if entry.encoded_len() > self.plugin.config.max_entry_bytes {
            return Err(NotStored::TooLarge);
        }
        let metrics = &self.plugin.metrics;
        match self
            .plugin
            .table
            .insert(&EnvoySharedData, key, &entry.encode(), now)
        {
            Ok(stored) => {
                metrics.inc(Counter::Stores);
                if stored.evicted {
                    metrics.inc(Counter::Evictions);
                }
            }
            Err(_) => metrics.inc(Counter::StoreFailures),
        }
        Ok(())
    }

    fn skip_store(&self) {
        self.plugin.metrics.inc(Counter::StoreSkipped);
    }
}

impl Context for CacheFilter {}

impl HttpContext for CacheFilter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let head = self.read_head();
        match classify_headers(&self.plugin.config, &head, end_of_stream) {
            HeadersVerdict::NotHandled => Action::Continue,
            HeadersVerdict::Bypass(reason) => self.bypass(reason),
            HeadersVerdict::Ready(classified) => self.lookup(classified.key),
            HeadersVerdict::NeedBody => {
                // Held with `allow_on_headers_stop_iteration`: nothing goes upstream until the
                // body has been read and the request is known to be a miss.
                self.state = State::AwaitingBody(head);
                Action::Pause
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !matches!(self.state, State::AwaitingBody(_)) {
            return Action::Continue;
        }
        if body_size > self.plugin.config.max_body_bytes {
            return self.bypass(Bypass::BodyTooLarge);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let State::AwaitingBody(head) = std::mem::replace(&mut self.state, State::Ignored) else {
            return Action::Continue;
        };
        let body = self.get_http_request_body(0, body_size).unwrap_or_default();
        match classify_body(&self.plugin.config, &head, &body) {
            Ok(classified) => self.lookup(classified.key),
            Err(reason) => self.bypass(reason),
        }
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // A body that ends in trailers never showed end_of_stream: let it through uninspected.
        if matches!(self.state, State::AwaitingBody(_)) {
            return self.bypass(Bypass::EmptyBody);
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let debug = self.plugin.config.debug_headers;
        match &self.state {
            State::Ignored | State::Served | State::AwaitingBody(_) => {}
            State::Bypassed(reason) => {
                self.set_http_response_header(CACHE_HEADER, Some("BYPASS"));
                if debug {
                    self.set_http_response_header(REASON_HEADER, Some(reason.as_str()));
                }
            }
            State::Missed { key, .. } => {
                let key = *key;
                self.set_http_response_header(CACHE_HEADER, Some("MISS"));
                if debug {
                    self.set_http_response_header(KEY_HEADER, Some(&key.hex()));
                }
                match self.start_capture(end_of_stream) {
                    Ok(capture) => {
                        self.state = State::Missed {
                            key,
                            capture: Some(capture),
                        };
                    }
                    Err(reason) => {
                        self.skip_store();
                        if debug {
                            self.set_http_response_header(REASON_HEADER, Some(reason.as_str()));
                        }
                    }
                }
            }
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let limit = self.plugin.config.max_entry_bytes;
        let State::Missed { capture, .. } = &mut self.state else {
            return Action::Continue;
        };
        let Some(c) = capture else {
            return Action::Continue;
        };
        if c.body.len() + body_size > limit {
            *capture = None;
            self.skip_store();
            return Action::Continue;
        }
        if body_size > 0 {
            if let Some(chunk) = self.get_http_response_body(0, body_size) {
                if let State::Missed {
                    capture: Some(c), ..
                } = &mut self.state
                {
                    c.body.extend_from_slice(&chunk);
                }
            }
        }
        if end_of_stream {
            if let State::Missed { key, capture } = &mut self.state {
                let key = *key;
                if let Some(c) = capture.take() {
                    if self.finish_capture(&key, c).is_err() {
                        self.skip_store();
                    }
                }
            }
        }
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        if let State::Missed { capture, .. } = &mut self.state {
            if capture.take().is_some() {
                self.skip_store();
            }
        }
        Action::Continue
    }
}
