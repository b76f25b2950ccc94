//! One worker's coalescing machinery, run by the root context: it dispatches shared fetches (a
//! callout made by the root lives as long as the worker, not as long as one client), answers or
//! releases the requests waiting on them, wakes other workers, and runs the fallback timer.
//!
//! The HTTP contexts of the worker share [`Worker`] with the root through `Rc<RefCell<_>>`. No
//! borrow is ever held across a host call: a host call may run another callback of this VM.
//! Every callout is dispatched before any waiter is answered in the same root callback, because
//! answering switches the effective context to that waiter.

use super::metrics::Counter;
use super::root::Plugin;
use super::shared::EnvoySharedData;
use crate::coalesce::{LocalFlight, Peek, Waiter};
use crate::fetch::FetchRequest;
use crate::key::CacheKey;
use crate::policy::{body_storable, storable_entry};
use crate::response::Response;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

/// Wake-up messages on a worker's queue: dispatch what is pending, or a flight ended
/// (`W` + key digest + the shareable answer, if it fits).
const MSG_DISPATCH: u8 = b'D';
const MSG_WAKE: u8 = b'W';
/// How long a finished flight record stays for other workers' timers before it is emptied.
const DONE_GRACE_MS: u64 = 1000;
/// A follower that heard nothing for this long checks its flight itself (lost wake-up).
const LOST_WAKEUP_MS: u64 = 500;
/// A flight's lease outlives its fetch timeout by this much before it counts as lost.
pub const LEASE_GRACE_MS: u64 = 2000;
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
    pub dispatched_ms: u64,
    /// The key holds the caller's credentials or identity: followers are the same caller.
    pub per_caller: bool,
}

#[derive(Default)]
pub struct Worker {
    /// Random per VM: owner id in flight records.
    pub id: u64,
    /// This worker's wake-up queue token.
    pub queue: Option<u32>,
    pub local: crate::coalesce::LocalFlights,
    /// Claimed by a request, waiting for the root to dispatch.
    pub pending: Vec<Fetch>,
    /// Dispatched: callout token to fetch.
    pub fetches: HashMap<u32, Fetch>,
    /// Finished records this worker published for watchers, to empty after a grace period.
    pub published: Vec<(CacheKey, u64)>,
    pub outcomes: HashMap<u32, Outcome>,
    /// A body callback arrived after the filter held request headers: Envoy's plugin option
    /// `allow_on_headers_stop_iteration` is on, and held requests cannot hang.
    pub body_after_pause_seen: bool,
    /// Until then, the requests held for their body, and since when (the hang watchdog).
    pub held_for_body: Vec<(u32, u64)>,
    /// Held requests were found hanging: POST bodies are no longer held on this worker.
    pub bodies_not_delivered: bool,
    /// Held requests released by the watchdog so far.
    pub hung_released: u32,
}

pub type SharedWorker = Rc<RefCell<Worker>>;

pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn lease_ms(plugin: &Plugin) -> u64 {
    plugin
        .config
        .fetch_timeout_ms
        .saturating_add(LEASE_GRACE_MS)
}

/// Asks the root to dispatch what HTTP contexts claimed (they cannot make a callout that outlives
/// themselves).
pub fn request_dispatch(worker: &SharedWorker) -> bool {
    let queue = worker.borrow().queue;
    queue.is_some_and(|q| hostcalls::enqueue_shared_queue(q, Some(&[MSG_DISPATCH])).is_ok())
}

/// Ends a flight that will never be fetched: its watchers go upstream on their own.
pub fn abandon(plugin: &Plugin, worker: &SharedWorker, key: &CacheKey) {
    let id = worker.borrow().id;
    let watchers = plugin
        .flights
        .complete(&EnvoySharedData, key, id, None, now_ms());
    wake(&watchers, key, None);
}

/// Root: messages arrived on this worker's queue.
pub fn on_queue_ready(plugin: &Plugin, worker: &SharedWorker, queue_id: u32) {
    let mut dispatch = false;
    let mut wakes: Vec<Vec<u8>> = Vec::new();
    while let Ok(Some(message)) = hostcalls::dequeue_shared_queue(queue_id) {
        match message.first() {
            Some(&MSG_DISPATCH) => dispatch = true,
            Some(&MSG_WAKE) if message.len() >= 33 => wakes.push(message),
            _ => {}
        }
    }
    if dispatch {
        dispatch_pending(plugin, worker);
    }
    for message in wakes {
        let mut key = CacheKey { digest: [0; 32] };
        key.digest.copy_from_slice(&message[1..33]);
        match message.get(33..).filter(|r| !r.is_empty()) {
            // The answer came with the wake-up: no shared-data read, and no race with the next
            // flight of the same key overwriting the record.
            Some(result) => deliver_followed(
                plugin,
                worker,
                &key,
                Response::decode_from_flight(result, &key),
            ),
            None => {
                let _ = check_followed(plugin, worker, &key);
            }
        }
    }
}

fn dispatch_pending(plugin: &Plugin, worker: &SharedWorker) {
    let pending = std::mem::take(&mut worker.borrow_mut().pending);
    let timeout = Duration::from_millis(plugin.config.fetch_timeout_ms);
    let mut failed = Vec::new();
    for mut fetch in pending {
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
                fetch.dispatched_ms = now_ms();
                worker.borrow_mut().fetches.insert(token, fetch);
            }
            // Circuit breaker open, unknown cluster, no healthy host: a failed fetch.
            Err(_) => failed.push(fetch),
        }
    }
    // Only now answer anyone: answering changes the effective context.
    for fetch in failed {
        plugin.metrics.inc(Counter::FetchFailures);
        let failure = Response::failure(
            503,
            "upstream connect error: the shared fetch could not be sent",
        );
        finish(plugin, worker, &fetch, Ok(failure), Some("fetch-failed"));
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
    let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
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
    let vary = &plugin.config.vary_headers;
    let for_followers =
        |r: &Response| r.shareable(vary).is_ok() && (fetch.per_caller || caller_independent(r));
    let shareable = response.as_ref().ok().filter(|r| for_followers(r));
    let for_watchers =
        shareable.and_then(|r| r.encode_for_flight(&fetch.key, now, plugin.config.max_entry_bytes));
    let id = worker.borrow().id;
    let watchers =
        plugin
            .flights
            .complete(&EnvoySharedData, &fetch.key, id, for_watchers.clone(), now);
    if !watchers.is_empty() {
        worker.borrow_mut().published.push((fetch.key, now));
        wake(&watchers, &fetch.key, for_watchers.as_deref());
    }
    let flight = worker.borrow_mut().local.take(&fetch.key);
    let Some(flight) = flight else { return };
    for waiter in flight.waiters {
        match &response {
            Ok(r) if waiter.leader => {
                answer(plugin, worker, &waiter, r, ("MISS", not_stored), &fetch.key)
            }
            Ok(r) if for_followers(r) => {
                answer(plugin, worker, &waiter, r, ("COALESCED", None), &fetch.key)
            }
            Ok(_) => release(worker, &waiter, "not-shareable"),
            Err(()) => release(worker, &waiter, "not-relayable"),
        }
    }
}

/// Whether an answer cannot depend on who asked, when the key does not say who asked: a clean
/// GraphQL result, or a gateway failure (which every waiter must see, as the leader did).
/// A 401/403 or a GraphQL `errors` answer may be about the leader's credentials only.
fn caller_independent(r: &Response) -> bool {
    r.status >= 500 || (r.status == 200 && body_storable(&r.body).is_ok())
}

fn wake(watchers: &[u32], key: &CacheKey, result: Option<&[u8]>) {
    if watchers.is_empty() {
        return;
    }
    let mut message = Vec::with_capacity(33 + result.map_or(0, <[u8]>::len));
    message.push(MSG_WAKE);
    message.extend_from_slice(&key.digest);
    message.extend_from_slice(result.unwrap_or_default());
    for &queue in watchers {
        let _ = hostcalls::enqueue_shared_queue(queue, Some(&message));
    }
}

/// Answers this worker's followers of `key` with `response`, or lets them go upstream.
fn deliver_followed(
    plugin: &Plugin,
    worker: &SharedWorker,
    key: &CacheKey,
    response: Option<Response>,
) {
    if !worker.borrow().local.is_following(key) {
        return;
    }
    let flight = worker.borrow_mut().local.take(key);
    for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
        match &response {
            Some(r) => answer(plugin, worker, &waiter, r, ("COALESCED", None), key),
            None => release(worker, &waiter, "not-shareable"),
        }
    }
}

/// Root: a followed key may be done (the fallback timer asks, or a wake-up without the answer).
/// Returns whether its waiters were let go.
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
            deliver_followed(
                plugin,
                worker,
                key,
                Response::decode_from_flight(&bytes, key),
            );
            true
        }
        Peek::Done(None) => {
            deliver_followed(plugin, worker, key, None);
            true
        }
        Peek::Gone => {
            let flight = worker.borrow_mut().local.take(key);
            for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
                release(worker, &waiter, "leader-gone");
            }
            true
        }
    }
}

/// Without `allow_on_headers_stop_iteration`, Envoy never delivers the body of a request whose
/// headers the filter held, and the request would hang: after this long it is let go.
const HELD_FOR_BODY_MS: u64 = 1000;
/// Hung requests before concluding the option is off (one slow client proves nothing).
const HUNG_TO_CONCLUDE: u32 = 3;

/// Root: lets go requests held for a body that never came (a misconfigured plugin), once, loudly.
fn release_hung_bodies(worker: &SharedWorker, now: u64) {
    let hung: Vec<u32> = {
        let mut w = worker.borrow_mut();
        if w.body_after_pause_seen || w.held_for_body.is_empty() {
            return;
        }
        let (hung, keep): (Vec<_>, Vec<_>) = w
            .held_for_body
            .drain(..)
            .partition(|(_, since)| now.saturating_sub(*since) >= HELD_FOR_BODY_MS);
        w.held_for_body = keep;
        hung.into_iter().map(|(ctx, _)| ctx).collect()
    };
    if hung.is_empty() {
        return;
    }
    let conclude = {
        let mut w = worker.borrow_mut();
        w.hung_released += hung.len() as u32;
        let conclude = !w.bodies_not_delivered && w.hung_released >= HUNG_TO_CONCLUDE;
        w.bodies_not_delivered |= conclude;
        conclude
    };
    if conclude {
        let _ = hostcalls::log(
            proxy_wasm::types::LogLevel::Error,
            "graphql-cache: request bodies never arrived after the filter held the headers: set \
             `allow_on_headers_stop_iteration: true` in the wasm filter's plugin config. Until \
             then POST requests pass through uncached on this worker (GET requests are cached).",
        );
    }
    for ctx in hung {
        worker
            .borrow_mut()
            .outcomes
            .insert(ctx, Outcome::Released("body-not-delivered"));
        if hostcalls::set_effective_context(ctx).is_ok() {
            let _ = hostcalls::resume_http_request();
        }
    }
}

/// Root: the fallback timer. Releases waiters past `max_wait_ms`, ends flights whose fetch was
/// lost, checks followed flights nobody woke us for, and empties finished records.
pub fn on_tick(plugin: &Plugin, worker: &SharedWorker) {
    let now = now_ms();
    release_hung_bodies(worker, now);
    let lease = lease_ms(plugin);
    let (expired, abandoned, lost_fetches) = {
        let mut w = worker.borrow_mut();
        let expired = w.local.expire(now, plugin.config.max_wait_ms);
        let abandoned: Vec<(CacheKey, LocalFlight)> = w.local.take_abandoned(now, lease);
        // A callout that never answered (it should time out at fetch_timeout_ms): forget it.
        let before = w.fetches.len();
        w.fetches
            .retain(|_, f| now.saturating_sub(f.dispatched_ms) < lease.saturating_mul(2));
        (expired, abandoned, before - w.fetches.len())
    };
    for _ in 0..lost_fetches {
        plugin.metrics.inc(Counter::FetchFailures);
    }
    for waiter in expired {
        plugin.metrics.inc(Counter::WaitTimeouts);
        release(worker, &waiter, "wait-timeout");
    }
    for (key, flight) in abandoned {
        abandon(plugin, worker, &key);
        for waiter in flight.waiters {
            release(worker, &waiter, "fetch-lost");
        }
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

/// Answers a waiting request; `label` is the `x-cache` value and the debug reason.
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
