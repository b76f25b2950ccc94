//! The per-request HTTP context: reads the request, serves hits, joins or starts the shared fetch
//! for misses, and captures plain misses for the cache as they stream back.

use super::metrics::Counter;
use super::root::Plugin;
use super::shared::EnvoySharedData;
use super::worker::{self, now_ms, Fetch, Outcome, SharedWorker};
use crate::bypass::Bypass;
use crate::classify::scope_key;
use crate::classify::{
    classify_body, classify_get, classify_headers, handles, memo_input, Classified, Decided,
    HeadersVerdict, RequestHead,
};
use crate::coalesce::{Join, LocalJoin};
use crate::config::IdentitySource;
use crate::entry::Entry;
use crate::fetch::FetchRequest;
use crate::key::CacheKey;
use crate::policy::{response_ttl, storable_entry, NotStored};
use crate::request::split_path;
use crate::rules::RouteOverride;
use crate::rules::Scope;
use crate::store::Lookup;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

const CACHE_HEADER: &str = "x-cache";
const KEY_HEADER: &str = "x-cache-key";
const REASON_HEADER: &str = "x-cache-reason";

enum State {
    /// Not a request this filter handles: no header, no counting.
    Ignored,
    Bypassed(Bypass),
    AwaitingBody(RequestHead),
    /// Paused, waiting for a shared fetch (its own or another request's).
    Waiting {
        key: CacheKey,
    },
    /// Sent upstream; the answer is stored if it qualifies.
    Missed {
        key: CacheKey,
        capture: Option<Capture>,
        reason: Option<&'static str>,
    },
    /// Answered by the filter; the response callbacks must leave it alone.
    Served,
}

/// A response being copied for the cache as it streams to the client.
struct Capture {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

pub struct CacheFilter {
    plugin: Rc<Plugin>,
    worker: SharedWorker,
    context_id: u32,
    state: State,
    /// This request's TTL, from the configuration, its rules and its route.
    ttl_seconds: u64,
}

impl CacheFilter {
    pub fn new(plugin: Rc<Plugin>, worker: SharedWorker, context_id: u32) -> Self {
        CacheFilter {
            plugin,
            worker,
            context_id,
            state: State::Ignored,
            ttl_seconds: 0,
        }
    }

    fn read_head(&self) -> RequestHead {
        let vary_names = &self.plugin.config.vary_headers;
        let headers = self.get_http_request_headers_bytes();
        let mut head = RequestHead {
            vary: vec![None; vary_names.len()],
            ..RequestHead::default()
        };
        for (name, value) in &headers {
            let slot = match name.as_str() {
                ":method" => &mut head.method,
                ":path" => &mut head.path,
                ":authority" => &mut head.authority,
                "content-type" => head.content_type.get_or_insert_with(Vec::new),
                "content-encoding" => head.content_encoding.get_or_insert_with(Vec::new),
                "content-length" => head.content_length.get_or_insert_with(Vec::new),
                "accept" => head.accept.get_or_insert_with(Vec::new),
                "accept-encoding" => head.accept_encoding.get_or_insert_with(Vec::new),
                other => match vary_names.iter().position(|v| v == other) {
                    Some(i) => head.vary[i].get_or_insert_with(Vec::new),
                    None => continue,
                },
            };
            // Repeated headers are joined, so every value takes part in the decision and the key.
            if !slot.is_empty() {
                slot.push(b',');
            }
            slot.extend_from_slice(value);
        }
        head.headers = headers;
        head
    }

    /// What the route says: read only for requests that will be keyed (property reads cost).
    fn read_route(&self, head: &mut RequestHead) {
        head.route = self.read_route_override();
        // The route's choice of cluster may depend on headers outside the key (a canary header).
        if self.plugin.config.key_by_cluster {
            head.cluster = hostcalls::get_property(vec!["xds", "cluster_name"])
                .ok()
                .flatten();
        }
    }

    /// The caller's identity from the configured source; read only for private operations.
    fn read_identity(&self, head: &RequestHead) -> Option<Vec<u8>> {
        match &self.plugin.config.identity {
            None => None,
            // Repeated values are joined: every one of them takes part in the scope.
            Some(IdentitySource::Header(name)) => {
                let values: Vec<&[u8]> = head
                    .headers
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, v)| v.as_slice())
                    .collect();
                (!values.is_empty()).then(|| values.join(&b","[..]))
            }
            Some(source @ IdentitySource::JwtClaim { .. }) => {
                let path = source.property_path()?;
                hostcalls::get_property(path).ok().flatten()
            }
        }
    }

    /// Per-route overrides from `filter_metadata.<namespace>` on the matched route: numbers
    /// arrive as 8-byte little-endian doubles, booleans as one byte.
    fn read_route_override(&self) -> RouteOverride {
        let Some(ns) = &self.plugin.config.route_metadata else {
            return RouteOverride::default();
        };
        let read = |field: &str| {
            hostcalls::get_property(vec!["xds", "route_metadata", "filter_metadata", ns, field])
                .ok()
                .flatten()
        };
        let ttl_seconds = read("ttl_seconds").and_then(|b| {
            let v = f64::from_le_bytes(b.as_slice().try_into().ok()?);
            (v.is_finite() && v >= 0.0).then_some(v as u64)
        });
        let disabled = read("disabled").is_some_and(|b| match b.as_slice() {
            [flag] => *flag != 0,
            other => other == b"true",
        });
        RouteOverride {
            ttl_seconds,
            disabled,
        }
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

    /// Serves the key from the cache, or handles the miss.
    /// Classifies through the per-worker memo: an identical recent request is not parsed again.
    fn decide(
        &self,
        head: &RequestHead,
        body: &[u8],
        classify: impl FnOnce() -> Result<Classified, Bypass>,
    ) -> Result<Decided, Bypass> {
        let input = memo_input(head, body);
        if let Some(known) = self.plugin.memo.borrow().get(&input) {
            return known;
        }
        let decided = classify().map(Decided::from);
        self.plugin.memo.borrow_mut().insert(input, decided);
        decided
    }

    /// Looks up a classified request, after scoping private ones to the caller.
    fn lookup_scoped(
        &mut self,
        decided: Result<Decided, Bypass>,
        head: &RequestHead,
        body: Option<Vec<u8>>,
    ) -> Action {
        let scoped = decided.and_then(|d| match d.policy.scope {
            Scope::Public => Ok(d),
            Scope::Private => scope_key(d, self.read_identity(head).as_deref()),
        });
        match scoped {
            Ok(d) => self.lookup(d, head, body),
            Err(reason) => self.bypass(reason),
        }
    }

    fn lookup(&mut self, decided: Decided, head: &RequestHead, body: Option<Vec<u8>>) -> Action {
        let key = decided.key;
        self.ttl_seconds = decided.policy.ttl_seconds;
        let now = now_ms();
        if let Some(entry) = self.find(&key, now) {
            if self.serve(&entry, &key, now) {
                self.plugin.metrics.inc(Counter::Hits);
                self.state = State::Served;
                return Action::Pause;
            }
        }
        self.plugin.metrics.inc(Counter::Misses);
        if self.plugin.config.coalesce {
            // With the caller's credentials or identity in the key, followers are the same caller
            // and may share any answer; otherwise only answers that do not depend on the caller.
            let per_caller = decided.policy.scope == Scope::Private
                || !self.plugin.config.vary_headers.is_empty();
            if let Some(action) = self.coalesce(key, head, body, now, per_caller) {
                return action;
            }
        }
        self.state = State::Missed {
            key,
            capture: None,
            reason: None,
        };
        Action::Continue
    }

    /// Joins this worker's wait for the key, or the cross-worker flight, or starts one. `None`
    /// means: go upstream alone.
    fn coalesce(
        &mut self,
        key: CacheKey,
        head: &RequestHead,
        body: Option<Vec<u8>>,
        now: u64,
        per_caller: bool,
    ) -> Option<Action> {
        let config = &self.plugin.config;
        let joined =
            self.worker
                .borrow_mut()
                .local
                .join(&key, self.context_id, now, config.max_waiters);
        match joined {
            LocalJoin::Joined => {
                self.state = State::Waiting { key };
                return Some(Action::Pause);
            }
            LocalJoin::Full => return None,
            LocalJoin::NoFlight => {}
        }
        let cluster = match &config.upstream_cluster {
            Some(c) => c.clone(),
            None => {
                let read = || {
                    hostcalls::get_property(vec!["xds", "cluster_name"])
                        .ok()
                        .flatten()
                };
                let cluster = head.cluster.clone().or_else(read)?;
                String::from_utf8(cluster).ok().filter(|c| !c.is_empty())?
            }
        };
        let request = FetchRequest::from_request(cluster, head, body)?;
        let (id, queue) = {
            let w = self.worker.borrow();
            (w.id, w.queue?)
        };
        let lease = config
            .fetch_timeout_ms
            .saturating_add(worker::LEASE_GRACE_MS);
        match self
            .plugin
            .flights
            .join(&EnvoySharedData, &key, id, queue, now, lease, true)
        {
            Join::Lead => {
                {
                    let mut w = self.worker.borrow_mut();
                    w.local.start(key, true, self.context_id, now);
                    w.pending.push(Fetch {
                        key,
                        request,
                        ttl_seconds: self.ttl_seconds,
                        dispatched_ms: 0,
                        per_caller,
                    });
                }
                if !worker::request_dispatch(&self.worker) {
                    let mut w = self.worker.borrow_mut();
                    w.local.take(&key);
                    w.pending.retain(|f| f.key != key);
                    drop(w);
                    worker::abandon(&self.plugin, &self.worker, &key);
                    return None;
                }
                self.plugin.metrics.inc(Counter::Leaders);
            }
            Join::Follow => self
                .worker
                .borrow_mut()
                .local
                .start(key, false, self.context_id, now),
            Join::Alone => return None,
        }
        self.state = State::Waiting { key };
        Some(Action::Pause)
    }

    /// A fresh entry for `key`: this worker's copy, else shared data (then copied here).
    fn find(&self, key: &CacheKey, now: u64) -> Option<Rc<[u8]>> {
        if let Some(entry) = self.plugin.hot.borrow_mut().get(key, now) {
            return Some(entry);
        }
        let Lookup::Hit(bytes) = self.plugin.table.lookup(&EnvoySharedData, key, now) else {
            return None;
        };
        let expires = Entry::peek(&bytes).map(|(_, e)| e).unwrap_or_default();
        let entry: Rc<[u8]> = bytes.into();
        self.plugin
            .hot
            .borrow_mut()
            .insert(*key, Rc::clone(&entry), expires);
        Some(entry)
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

    /// What happened to this request while it waited (set by the root when it let it go).
    fn take_outcome(&self) -> Option<Outcome> {
        self.worker
            .try_borrow_mut()
            .ok()
            .and_then(|mut w| w.outcomes.remove(&self.context_id))
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
        response_ttl(
            u32::from(status),
            headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
            &config.vary_headers,
            self.ttl_seconds,
        )?;
        if end_of_stream {
            return Err(NotStored::NotJson);
        }
        Ok(Capture {
            status,
            headers,
            body: Vec::new(),
        })
    }

    fn finish_capture(&self, key: &CacheKey, capture: Capture) {
        let now = now_ms();
        let config = &self.plugin.config;
        let metrics = &self.plugin.metrics;
        let entry = storable_entry(
            key,
            capture.status,
            &capture.headers,
            &capture.body,
            config,
            self.ttl_seconds,
            now,
        );
        let Ok(bytes) = entry else {
            metrics.inc(Counter::StoreSkipped);
            return;
        };
        match self.plugin.table.insert(&EnvoySharedData, key, &bytes, now) {
            Ok(stored) => {
                metrics.inc(Counter::Stores);
                if stored.evicted {
                    metrics.inc(Counter::Evictions);
                }
            }
            Err(_) => metrics.inc(Counter::StoreFailures),
        }
    }

    fn label_miss(&mut self, end_of_stream: bool) {
        let debug = self.plugin.config.debug_headers;
        let State::Missed { key, reason, .. } = &self.state else {
            return;
        };
        let (key, reason) = (*key, *reason);
        self.set_http_response_header(CACHE_HEADER, Some("MISS"));
        if debug {
            self.set_http_response_header(KEY_HEADER, Some(&key.hex()));
        }
        let not_stored = match self.start_capture(end_of_stream) {
            Ok(capture) => {
                self.state = State::Missed {
                    key,
                    capture: Some(capture),
                    reason,
                };
                reason
            }
            Err(why) => {
                self.plugin.metrics.inc(Counter::StoreSkipped);
                Some(reason.unwrap_or(why.as_str()))
            }
        };
        if let (true, Some(r)) = (debug, not_stored) {
            self.set_http_response_header(REASON_HEADER, Some(r));
        }
    }
}

impl Drop for CacheFilter {
    fn drop(&mut self) {
        // A client that left while waiting must not be answered later.
        if let Ok(mut w) = self.worker.try_borrow_mut() {
            if matches!(self.state, State::Waiting { .. }) {
                w.local.remove_waiter(self.context_id);
            }
            w.outcomes.remove(&self.context_id);
            if !w.held_for_body.is_empty() {
                let me = self.context_id;
                w.held_for_body.retain(|(ctx, _)| *ctx != me);
            }
        }
    }
}

impl Context for CacheFilter {}

impl HttpContext for CacheFilter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let plugin = Rc::clone(&self.plugin);
        let config = &plugin.config;
        // Paths the filter does not handle cost one header read, nothing more.
        if !config.paths.is_empty() {
            let path = self
                .get_http_request_header_bytes(":path")
                .unwrap_or_default();
            if !handles(config, &path) {
                return Action::Continue;
            }
        }
        let mut head = self.read_head();
        if head.method == b"GET" && handles(config, &head.path) {
            // A GET with a body: the key could not account for the body the origin may read.
            if !end_of_stream {
                return self.bypass(Bypass::GetWithBody);
            }
            self.read_route(&mut head);
            let decided = self.decide(&head, b"", || {
                let full = std::str::from_utf8(&head.path).map_err(|_| Bypass::BadQueryString)?;
                let (path, query) = split_path(full);
                classify_get(config, &head, path, query)
            });
            return self.lookup_scoped(decided, &head, None);
        }
        match classify_headers(config, &head, end_of_stream) {
            HeadersVerdict::NotHandled => Action::Continue,
            HeadersVerdict::Bypass(reason) => self.bypass(reason),
            HeadersVerdict::Ready(classified) => {
                self.lookup_scoped(Ok(classified.into()), &head, None)
            }
            HeadersVerdict::NeedBody => {
                if self.worker.borrow().bodies_not_delivered {
                    return self.bypass(Bypass::BodyNotDelivered);
                }
                // Held with `allow_on_headers_stop_iteration`: nothing goes upstream until the
                // body has been read and the request is known to be a miss.
                self.read_route(&mut head);
                self.state = State::AwaitingBody(head);
                let mut w = self.worker.borrow_mut();
                if !w.body_after_pause_seen {
                    w.held_for_body.push((self.context_id, now_ms()));
                }
                Action::Pause
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        match self.state {
            State::AwaitingBody(_) => {
                let mut w = self.worker.borrow_mut();
                if !w.body_after_pause_seen {
                    // Released by the hang watchdog: this body proves nothing, let it through.
                    if w.outcomes.remove(&self.context_id).is_some() {
                        drop(w);
                        return self.bypass(Bypass::BodyNotDelivered);
                    }
                    w.body_after_pause_seen = true;
                    w.held_for_body.clear();
                }
            }
            // Decided at the headers (a GET with a body): it stays held until answered or released.
            State::Waiting { .. } | State::Served => return Action::Pause,
            _ => return Action::Continue,
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
        let plugin = Rc::clone(&self.plugin);
        let decided = self.decide(&head, &body, || classify_body(&plugin.config, &head, &body));
        self.lookup_scoped(decided, &head, Some(body))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // A body that ends in trailers never showed end_of_stream: let it through uninspected.
        if matches!(self.state, State::AwaitingBody(_)) {
            return self.bypass(Bypass::EmptyBody);
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        if let State::Waiting { key } = self.state {
            match self.take_outcome() {
                Some(Outcome::Answered) => {
                    self.state = State::Served;
                    return Action::Continue;
                }
                Some(Outcome::Released(reason)) => {
                    self.state = State::Missed {
                        key,
                        capture: None,
                        reason: Some(reason),
                    }
                }
                // A response while still waiting comes from Envoy itself (e.g. a timeout).
                None => {
                    if let Ok(mut w) = self.worker.try_borrow_mut() {
                        w.local.remove_waiter(self.context_id);
                    }
                    self.state = State::Missed {
                        key,
                        capture: None,
                        reason: Some("envoy-reply"),
                    }
                }
            }
        }
        match &self.state {
            State::Ignored | State::Served | State::AwaitingBody(_) | State::Waiting { .. } => {}
            State::Bypassed(reason) => {
                let reason = *reason;
                self.set_http_response_header(CACHE_HEADER, Some("BYPASS"));
                if self.plugin.config.debug_headers {
                    self.set_http_response_header(REASON_HEADER, Some(reason.as_str()));
                }
            }
            State::Missed { .. } => self.label_miss(end_of_stream),
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
            self.plugin.metrics.inc(Counter::StoreSkipped);
            return Action::Continue;
        }
        let chunk = if body_size > 0 {
            self.get_http_response_body(0, body_size)
        } else {
            None
        };
        let State::Missed {
            key,
            capture: Some(c),
            ..
        } = &mut self.state
        else {
            return Action::Continue;
        };
        if let Some(chunk) = chunk {
            c.body.extend_from_slice(&chunk);
        }
        if end_of_stream {
            let key = *key;
            if let State::Missed { capture, .. } = &mut self.state {
                if let Some(c) = capture.take() {
                    self.finish_capture(&key, c);
                }
            }
        }
        Action::Continue
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        if let State::Missed { capture, .. } = &mut self.state {
            if capture.take().is_some() {
                self.plugin.metrics.inc(Counter::StoreSkipped);
            }
        }
        Action::Continue
    }
}
