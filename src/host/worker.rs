//! One worker's coalescing machinery, run by the root context: it dispatches shared fetches (a
//! callout made by the root lives as long as the worker, not as long as one client), answers or
//! releases the requests waiting on them, wakes other workers, and runs the fallback timer.
//!
//! The HTTP contexts of the worker share [`Worker`] with the root through `Rc<RefCell<_>>`. No
//! borrow is ever held across a host call: a host call may run another callback of this VM.

use super::metrics::Counter;
use super::root::Plugin;
use super::shared::EnvoySharedData;
use crate::coalesce::{LocalFlights, Peek, Waiter};
use crate::fetch::FetchRequest;
use crate::key::CacheKey;
use crate::policy::storable_entry;
use crate::response::Response;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MapType;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

/// Wake-up messages on a worker's queue.
const MSG_DISPATCH: u8 = b'D';
const MSG_WAKE: u8 = b'W';
/// How long a finished flight record stays for other workers to read before it is emptied.
const DONE_GRACE_MS: u64 = 1000;
/// A follower that heard nothing for this long checks its flight itself (lost wake-up).
const LOST_WAKEUP_MS: u64 = 500;
/// The fallback timer's period.
pub const TICK: Duration = Duration::from_millis(100);

/// How a waiting request was let go, so its own callbacks know what happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a local reply (`MISS` for the leader, `COALESCED` for followers).
    Answered,
    /// Resumed to go upstream on its own; the reason shows in the debug header.
    Released(&'static str),
}

/// A fetch the root has yet to dispatch, or has in flight.
pub struct Fetch {
    pub key: CacheKey,
    pub request: FetchRequest,
    pub ttl_seconds: u64,
}

#[derive(Default)]
pub struct Worker {
    /// Random per VM: owner id in flight records.
    pub id: u64,
    /// This worker's wake-up queue token.
    pub queue: Option<u32>,
    pub local: LocalFlights,
    /// Claimed by a request, waiting for the root to dispatch.
    pub pending: Vec<Fetch>,
    /// Dispatched: callout token to fetch.
    pub fetches: HashMap<u32, Fetch>,
    /// Finished records this worker published for watchers, to empty after a grace period.
    pub published: Vec<(CacheKey, u64)>,
    pub outcomes: HashMap<u32, Outcome>,
}

pub type SharedWorker = Rc<RefCell<Worker>>;

fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Asks the root to dispatch what HTTP contexts claimed (they cannot make a callout that outlives
/// themselves).
pub fn request_dispatch(worker: &SharedWorker) -> bool {
    let queue = worker.borrow().queue;
    queue.is_some_and(|q| hostcalls::enqueue_shared_queue(q, Some(&[MSG_DISPATCH])).is_ok())
}

/// Root: a message arrived on this worker's queue.
pub fn on_queue_ready(plugin: &Plugin, worker: &SharedWorker, queue_id: u32) {
    while let Ok(Some(message)) = hostcalls::dequeue_shared_queue(queue_id) {
        match message.split_first() {
            Some((&MSG_DISPATCH, _)) => dispatch_pending(plugin, worker),
            Some((&MSG_WAKE, digest)) if digest.len() == 32 => {
                let mut key = CacheKey { digest: [0; 32] };
                key.digest.copy_from_slice(digest);
                let _ = check_followed(plugin, worker, &key);
            }
            _ => {}
        }
    }
}

fn dispatch_pending(plugin: &Plugin, worker: &SharedWorker) {
    let pending = std::mem::take(&mut worker.borrow_mut().pending);
    let timeout = Duration::from_millis(plugin.config.fetch_timeout_ms);
    for fetch in pending {
        let headers: Vec<(&str, &str)> = fetch
            .request
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let sent = hostcalls::dispatch_http_call(
            &fetch.request.cluster,
            headers,
            fetch.request.body.as_deref(),
            vec![],
            timeout,
        );
        match sent {
            Ok(token) => {
                worker.borrow_mut().fetches.insert(token, fetch);
            }
            // Circuit breaker open, unknown cluster, no healthy host: a failed fetch.
            Err(_) => {
                plugin.metrics.inc(Counter::FetchFailures);
                let failure = Response::failure(
                    503,
                    "upstream connect error: the shared fetch could not be sent",
                );
                finish(plugin, worker, &fetch, Ok(failure), Some("fetch-failed"));
            }
        }
    }
}

/// Root: the shared fetch came back (or failed).
pub fn on_fetch_response(
    plugin: &Plugin,
    worker: &SharedWorker,
    token: u32,
    num_headers: usize,
    body_size: usize,
) {
    let Some(fetch) = worker.borrow_mut().fetches.remove(&token) else {
        return;
    };
    // A reset has no headers, and reading any then would trap the VM.
    if num_headers == 0 {
        plugin.metrics.inc(Counter::FetchFailures);
        let failure = Response::failure(
            503,
            "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
        );
        finish(plugin, worker, &fetch, Ok(failure), Some("fetch-failed"));
        return;
    }
    let headers = hostcalls::get_map_bytes(MapType::HttpCallResponseHeaders).unwrap_or_default();
    let body = hostcalls::get_buffer(
        proxy_wasm::types::BufferType::HttpCallResponseBody,
        0,
        body_size,
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
        .unwrap_or(502);
    if status >= 500 {
        plugin.metrics.inc(Counter::FetchFailures);
    }
    let not_stored = store(plugin, &fetch, status, &headers, &body, now_ms());
    let response = Response::from_upstream(status, headers, body).map_err(|_| ());
    finish(plugin, worker, &fetch, response, not_stored);
}

/// Stores the answer if policy allows; otherwise says why not.
fn store(
    plugin: &Plugin,
    fetch: &Fetch,
    status: u16,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
    now: u64,
) -> Option<&'static str> {
    let config = &plugin.config;
    let entry = storable_entry(
        &fetch.key,
        status,
        headers,
        body,
        config,
        fetch.ttl_seconds,
        now,
    );
    let bytes = match entry {
        Ok(bytes) => bytes,
        Err(why) => {
            plugin.metrics.inc(Counter::StoreSkipped);
            return Some(why.as_str());
        }
    };
    match plugin
        .table
        .insert(&EnvoySharedData, &fetch.key, &bytes, now)
    {
        Ok(stored) => {
            plugin.metrics.inc(Counter::Stores);
            if stored.evicted {
                plugin.metrics.inc(Counter::Evictions);
            }
            None
        }
        Err(_) => {
            plugin.metrics.inc(Counter::StoreFailures);
            Some("store-failed")
        }
    }
}

/// Ends a flight: tells watching workers, then answers (or releases) this worker's waiters.
/// `response` is `Err` when the answer cannot be relayed; everyone then goes upstream.
/// `not_stored` is shown to the leader in the debug header.
fn finish(
    plugin: &Plugin,
    worker: &SharedWorker,
    fetch: &Fetch,
    response: Result<Response, ()>,
    not_stored: Option<&'static str>,
) {
    let now = now_ms();
    let shareable = response.as_ref().ok().filter(|r| r.shareable().is_ok());
    let for_watchers =
        shareable.and_then(|r| r.encode_for_flight(&fetch.key, now, plugin.config.max_entry_bytes));
    let id = worker.borrow().id;
    let watchers = plugin
        .flights
        .complete(&EnvoySharedData, &fetch.key, id, for_watchers, now);
    if !watchers.is_empty() {
        worker.borrow_mut().published.push((fetch.key, now));
        let mut message = Vec::with_capacity(33);
        message.push(MSG_WAKE);
        message.extend_from_slice(&fetch.key.digest);
        for queue in watchers {
            let _ = hostcalls::enqueue_shared_queue(queue, Some(&message));
        }
    }
    let flight = worker.borrow_mut().local.take(&fetch.key);
    let Some(flight) = flight else { return };
    for waiter in flight.waiters {
        match &response {
            Ok(r) if waiter.leader => {
                answer(plugin, worker, &waiter, r, ("MISS", not_stored), &fetch.key)
            }
            Ok(r) if r.shareable().is_ok() => {
                answer(plugin, worker, &waiter, r, ("COALESCED", None), &fetch.key)
            }
            Ok(_) => release(worker, &waiter, "not-shareable"),
            Err(()) => release(worker, &waiter, "not-relayable"),
        }
    }
}

/// Root: a followed key may be done (a wake-up arrived, or the fallback timer asks). Returns
/// whether its waiters were let go.
fn check_followed(plugin: &Plugin, worker: &SharedWorker, key: &CacheKey) -> bool {
    let (id, queue, following) = {
        let w = worker.borrow();
        (w.id, w.queue.unwrap_or_default(), w.local.is_following(key))
    };
    if !following {
        return false;
    }
    match plugin
        .flights
        .peek(&EnvoySharedData, key, id, queue, now_ms())
    {
        Peek::Waiting => false,
        Peek::Done(Some(bytes)) => {
            let flight = worker.borrow_mut().local.take(key);
            let response = Response::decode_from_flight(&bytes, key);
            for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
                match &response {
                    Some(r) => answer(plugin, worker, &waiter, r, ("COALESCED", None), key),
                    None => release(worker, &waiter, "unreadable-result"),
                }
            }
            true
        }
        Peek::Done(None) | Peek::Gone => {
            let flight = worker.borrow_mut().local.take(key);
            for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
                release(worker, &waiter, "leader-gone");
            }
            true
        }
    }
}

/// Root: the fallback timer. Releases waiters past `max_wait_ms`, checks followed flights nobody
/// woke us for, and empties finished records once watchers had time to read them.
pub fn on_tick(plugin: &Plugin, worker: &SharedWorker) {
    let now = now_ms();
    let expired = worker
        .borrow_mut()
        .local
        .expire(now, plugin.config.max_wait_ms);
    for waiter in expired {
        plugin.metrics.inc(Counter::WaitTimeouts);
        release(worker, &waiter, "wait-timeout");
    }
    let stale: Vec<CacheKey> = {
        let w = worker.borrow();
        w.local
            .followed_keys()
            .into_iter()
            .filter(|k| {
                w.local
                    .oldest_wait(k)
                    .is_some_and(|since| now.saturating_sub(since) >= LOST_WAKEUP_MS)
            })
            .collect()
    };
    for key in stale {
        // Resolved by the timer rather than a wake-up: a lost or late wake-up, worth counting.
        if check_followed(plugin, worker, &key) {
            plugin.metrics.inc(Counter::LateWakeups);
        }
    }
    let (id, due) = {
        let mut w = worker.borrow_mut();
        let (due, keep): (Vec<_>, Vec<_>) = w
            .published
            .drain(..)
            .partition(|(_, finished)| now.saturating_sub(*finished) >= DONE_GRACE_MS);
        w.published = keep;
        (w.id, due)
    };
    for (key, finished) in due {
        plugin
            .flights
            .clear_done(&EnvoySharedData, &key, id, finished);
    }
}

fn answer(
    plugin: &Plugin,
    worker: &SharedWorker,
    waiter: &Waiter,
    response: &Response,
    label: (&str, Option<&str>),
    key: &CacheKey,
) {
    let (cache, reason) = label;
    worker
        .borrow_mut()
        .outcomes
        .insert(waiter.context_id, Outcome::Answered);
    if hostcalls::set_effective_context(waiter.context_id).is_err() {
        // The client went away while waiting.
        worker.borrow_mut().outcomes.remove(&waiter.context_id);
        return;
    }
    let hex;
    let mut headers: Vec<(&str, &str)> = response
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    headers.push(("x-cache", cache));
    if plugin.config.debug_headers {
        hex = key.hex();
        headers.push(("x-cache-key", &hex));
        if let Some(r) = reason {
            headers.push(("x-cache-reason", r));
        }
    }
    if cache == "COALESCED" {
        plugin.metrics.inc(Counter::Coalesced);
    }
    let _ =
        hostcalls::send_http_response(u32::from(response.status), headers, Some(&response.body));
}

fn release(worker: &SharedWorker, waiter: &Waiter, reason: &'static str) {
    worker
        .borrow_mut()
        .outcomes
        .insert(waiter.context_id, Outcome::Released(reason));
    if hostcalls::set_effective_context(waiter.context_id).is_ok() {
        let _ = hostcalls::resume_http_request();
    } else {
        worker.borrow_mut().outcomes.remove(&waiter.context_id);
    }
}
