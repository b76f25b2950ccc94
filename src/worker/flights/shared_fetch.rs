//! The shared fetch, from the leader's side: the root context dispatches what requests claimed,
//! and when the answer (or a failure) comes back it stores it if it may, tells watching workers,
//! and answers or releases this worker's waiters.

use crate::cache::fates::Fate;
use crate::cache::not_stored::NotStored;
use crate::cache::storable::Answer;
use crate::coalesce::relay::Response;
use crate::coalesce::release::Release;
use crate::coalesce::sharing::followers_may_share;
use crate::coalesce::upstream::SharedFetch;
use crate::effects::counters::Counter;
use crate::effects::host::{status, RootHost};
use crate::entities::batch::EntityBatch;
use crate::request::key::CacheKey;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::fleet::write::{after_origin, release_later};
use crate::worker::flights::answer::{answer, release, Label, Labelled, Labels};
use crate::worker::flights::kinds::Kinds;
use crate::worker::flights::wake::wake;
use crate::worker::serving::marks::purged_since;
use crate::worker::serving::stale::{self, is_failure};
use crate::worker::serving::store::{account_store, store_answer, Stored};
use std::rc::Rc;

/// What came back for a callout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchResult {
    /// No headers: the connection was reset (reading headers now would trap the VM).
    Reset,
    Answer {
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
    },
    /// A body over `max_entry_bytes`: left in Envoy, never copied into the VM; every waiter goes
    /// upstream on its own (the router streams it), so memory stays bounded by configuration.
    TooLarge { status: Option<u16> },
}

/// Root: an origin fetch answered; reads it (never after a reset, never a body over the bound)
/// and finishes its flight.
pub fn on_fetch_callout(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    token: u32,
    returned: Returned,
) {
    let body_size = returned.body_size;
    let result = match returned.headers {
        None => FetchResult::Reset,
        Some(headers) if body_size > cx.config().max_entry_bytes => FetchResult::TooLarge {
            status: status(&headers),
        },
        Some(headers) => FetchResult::Answer {
            headers,
            body: cx.host().callout_body(body_size).unwrap_or_default(),
        },
    };
    on_fetch_response(cx, kinds, token, result);
}

/// Envoy's words for the failures the filter reports itself, so clients see what Envoy says.
const RESET_MESSAGE: &str =
    "upstream connect error or disconnect/reset before headers. reset reason: connection termination";
const TIMEOUT_MESSAGE: &str = "upstream request timeout";
/// How much earlier than its deadline (by the wall clock) Envoy may end a timed-out callout.
const TIMER_SLACK_MS: u64 = 50;
const REFUSED_MESSAGE: &str = "upstream connect error: the shared fetch could not be sent";

fn fetch_failed() -> Stored {
    Stored::not(NotStored::FetchFailed)
}

/// Root: sends `fetch` to the origin; gives it back if Envoy refused it.
pub fn to_origin(
    cx: &mut Ctx<'_, impl RootHost>,
    mut fetch: SharedFetch,
) -> Result<(), Box<SharedFetch>> {
    let host = cx.host();
    match host.dispatch(&fetch.request, cx.config().fetch_timeout_ms) {
        Ok(token) => {
            fetch.dispatched_ms = host.now_ms();
            cx.worker(|w| w.flights.sent(token, fetch));
            Ok(())
        }
        Err(_) => Err(Box::new(fetch)),
    }
}

/// Root: sends `fetch` to the origin, or, if Envoy refused it, tells everyone waiting for it at
/// once (so only where nothing else is to be sent in the callback).
pub fn to_origin_or_refused(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    fetch: SharedFetch,
) {
    if let Err(fetch) = to_origin(cx, fetch) {
        refused(cx, kinds, &fetch);
    }
}

/// Root: Envoy refused the origin fetch; everyone waiting for it is told so, as Envoy would.
/// Call after every callout of the callback is sent (this answers requests).
pub fn refused(cx: &mut Ctx<'_, impl RootHost>, kinds: &impl Kinds, fetch: &SharedFetch) {
    cx.host().count(Counter::FetchFailures);
    release_later(cx, fetch);
    let failure = Response::failure(503, REFUSED_MESSAGE);
    finish(
        cx,
        kinds,
        fetch,
        Ok(failure),
        &Labels::fetched(&fetch_failed()),
    );
}

/// Root: the callout `token` came back.
pub fn on_fetch_response(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    token: u32,
    result: FetchResult,
) {
    let Some(fetch) = cx.worker(|w| w.flights.returned(token)) else {
        return;
    };
    let (headers, body) = match result {
        FetchResult::Reset => {
            cx.host().count(Counter::FetchFailures);
            let failure = reset_failure(cx, &fetch);
            let mut stored = fetch_failed();
            after_origin(cx, &fetch, &mut stored);
            finish(cx, kinds, &fetch, Ok(failure), &Labels::fetched(&stored));
            return;
        }
        FetchResult::TooLarge { status } => {
            cx.host().count(Counter::StoreSkipped);
            let (key, op) = (&fetch.key, Some(&*fetch.asked.operation));
            account_store(cx, key, op, Fate::NotStored(NotStored::TooLarge), None);
            // Remembered for answers the key gives normally; one large error page proves nothing.
            if status == Some(200) {
                cx.worker(|w| w.too_large.insert(fetch.key));
            }
            after_origin(cx, &fetch, &mut Stored::default());
            finish(
                cx,
                kinds,
                &fetch,
                Err(Release::TooLarge),
                &Labels::fetched(&Stored::default()),
            );
            return;
        }
        FetchResult::Answer { headers, body } => (headers, body),
    };
    // An answer without a readable status is a bad gateway, as Envoy would call it.
    let status = status(&headers).unwrap_or(502);
    if status >= 500 {
        cx.host().count(Counter::FetchFailures);
    }
    let answer_in = Answer {
        status,
        headers: &headers,
        body: &body,
    };
    // A whole answer is stored before anyone is answered, so that every worker finds it the
    // moment its waiters have it: a request on another worker right after would otherwise lead a
    // second fetch (an entity batch's split waits: see `Kinds::store_batch`).
    let (mut stored, split_later) = match &fetch.entities {
        Some(batch) => kinds.store_batch(cx, batch, &answer_in),
        None => (store_answer(cx, &fetch.key, answer_in, &fetch.asked), false),
    };
    // An answer whose tags are not known here (not stored, or a batch split later) is overtaken
    // by any purge since it was asked.
    if stored.entry.is_empty() && !stored.overtaken {
        stored.overtaken = purged_since(cx, fetch.asked.born_us);
    }
    // Sent before anyone is answered: answering switches the effective context.
    after_origin(cx, &fetch, &mut stored);
    // What the answer may start once it is relayed (queued: see `entities::prefetch`).
    let ahead = fetch.trigger.as_ref().filter(|_| status == 200);
    let named = ahead.map(|t| (Rc::clone(t), body.clone()));
    let response =
        Response::from_upstream(status, headers, body).map_err(|_| Release::NotRelayable);
    finish(cx, kinds, &fetch, response, &Labels::fetched(&stored));
    if split_later {
        kinds.split_later(cx);
    }
    if let Some((trigger, body)) = named {
        kinds.after_answer(cx, &trigger, &body);
    }
}

/// The answer for a callout Envoy reset. Envoy ends a callout that timed out after the headers
/// as a reset: tell it apart by the clock, and answer as Envoy's router does for a timeout.
/// Envoy's timer runs on its monotonic clock and may fire a few ms before the wall clock says it
/// is due.
fn reset_failure(cx: &Ctx<'_, impl RootHost>, fetch: &SharedFetch) -> Response {
    let elapsed = cx.host().now_ms().saturating_sub(fetch.dispatched_ms);
    let due = cx.config().fetch_timeout_ms.saturating_sub(TIMER_SLACK_MS);
    if elapsed >= due {
        Response::failure(504, TIMEOUT_MESSAGE)
    } else {
        Response::failure(503, RESET_MESSAGE)
    }
}

/// Ends a flight: tells watching workers, then answers (or releases) this worker's waiters.
/// `response` is `Err(reason)` when the answer cannot be relayed; everyone then goes upstream.
/// `labels` say where the answer came from (for the leader: what storing did, in debug headers).
pub fn finish(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    fetch: &SharedFetch,
    response: Result<Response, Release>,
    labels: &Labels<'_>,
) {
    kinds.release_held(cx, fetch);
    let now_ms = cx.host().now_ms();
    let config = cx.config();
    let key = &fetch.key;
    // What was stored goes with the answer to every waiter, on this worker or another.
    let response = response.map(|mut r| {
        if r.tags.is_empty() {
            r.tags = labels.leader.tags.to_string();
        }
        r
    });
    let for_followers = |r: &Response| {
        !labels.overtaken && followers_may_share(r, &config.vary_headers, fetch.key_names_caller)
    };
    let shareable = response.as_ref().ok().filter(|r| for_followers(r));
    let for_watchers =
        shareable.and_then(|r| r.encode_for_flight(key, now_ms, config.max_entry_bytes));
    let id = cx.worker(|w| w.id);
    let watchers =
        cx.plugin()
            .flights
            .complete(cx.host(), key, id, for_watchers.as_deref(), now_ms);
    if !watchers.is_empty() {
        cx.worker(|w| w.flights.published(*key, now_ms));
        wake(cx.host(), &watchers, key, for_watchers.as_deref());
    }
    let (flight, batch) = cx.worker(|w| (w.flights.end(key), w.entity_batches.take(key)));
    let Some(flight) = flight else { return };
    if flight.waiters.is_empty() {
        return;
    }
    let stale = match &response {
        Ok(r) if is_failure(r) => instead_of_error(cx, kinds, key, batch.as_deref()),
        _ => None,
    };
    for waiter in flight.waiters {
        let ctx = waiter.context_id;
        if let Some(s) = &stale {
            answer(cx, ctx, key, Labelled::new(s, Label::STALE));
            if let Some(batch) = batch.as_deref() {
                kinds.count_served(cx, batch);
            }
            continue;
        }
        match &response {
            Ok(r) if waiter.leader => answer(cx, ctx, key, Labelled::new(r, labels.leader)),
            Ok(r) if for_followers(r) => answer(cx, ctx, key, Labelled::new(r, labels.followers)),
            Ok(_) if labels.overtaken => release(cx, ctx, Release::Overtaken),
            Ok(_) => release(cx, ctx, Release::NotShareable),
            Err(reason) => release(cx, ctx, *reason),
        }
    }
}

/// What to answer the waiters of `key` instead of a failure: for an entity `batch` (the one this
/// worker's requests waited on), what entity mode assembles from entries; otherwise the whole
/// answer's stale entry (`stale::instead_of_error`).
pub fn instead_of_error(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    key: &CacheKey,
    batch: Option<&EntityBatch>,
) -> Option<Response> {
    match batch {
        Some(batch) => kinds.instead_of_error(cx, batch),
        None => stale::instead_of_error(cx, key),
    }
}
