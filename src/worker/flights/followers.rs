//! The followers' side: this worker's requests waiting on another worker's fetch, let go when its
//! wake-up arrives (with the answer, or to read the flight record: see `root::queue`), or when
//! the timer finds the flight done or gone.

use crate::coalesce::flights::Peek;
use crate::coalesce::relay::Response;
use crate::coalesce::release::Release;
use crate::effects::host::RootHost;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::flights::answer::{answer, release, Label, Labelled};
use crate::worker::flights::kinds::Kinds;
use crate::worker::flights::shared_fetch::instead_of_error;
use crate::worker::serving::stale::is_failure;

/// Answers this worker's followers of `key` with the answer the flight ended with (`shared`, as
/// the leader encoded it), or lets them go upstream. A batch waiting for entities another worker
/// fetched (`key` is one of them, `shared` its entry) is answered from entries.
pub fn deliver(
    cx: &mut Ctx<'_, impl RootHost>,
    kinds: &impl Kinds,
    key: &CacheKey,
    shared: Option<&[u8]>,
) {
    let flight = cx.worker(|w| {
        if !w.flights.is_following(key) {
            return None;
        }
        Some((w.flights.end(key), w.entity_batches.take(key)))
    });
    let Some((flight, batch)) = flight else {
        return;
    };
    let (prefetched, waiters): (Vec<_>, Vec<_>) = flight
        .map(|f| f.waiters)
        .unwrap_or_default()
        .into_iter()
        .partition(|w| kinds.is_waiting_on_entities(cx, w.context_id));
    for waiter in prefetched {
        kinds.answer_waiting(cx, key, waiter.context_id, shared);
    }
    let response = shared.and_then(|bytes| Response::decode_from_flight(bytes, key));
    // The leader's fetch failed: this worker's followers may still have a stale answer.
    let stale = match &response {
        Some(r) if is_failure(r) && !waiters.is_empty() => {
            instead_of_error(cx, kinds, key, batch.as_deref())
        }
        _ => None,
    };
    for waiter in waiters {
        let ctx = waiter.context_id;
        match (&stale, &response) {
            (Some(s), _) => {
                answer(cx, ctx, key, Labelled::new(s, Label::STALE));
                if let Some(batch) = batch.as_deref() {
                    kinds.count_served(cx, batch);
                }
            }
            (None, Some(r)) => answer(cx, ctx, key, Labelled::new(r, Label::COALESCED)),
            (None, None) => release(cx, ctx, Release::NotShareable),
        }
    }
}

/// A followed key may be done: reads its flight record. Returns whether its waiters were let go.
pub fn check(cx: &mut Ctx<'_, impl RootHost>, kinds: &impl Kinds, key: &CacheKey) -> bool {
    let (id, queue, following) = cx.worker(|w| {
        (
            w.id,
            w.queue.unwrap_or_default(),
            w.flights.is_following(key),
        )
    });
    if !following {
        return false;
    }
    let now_ms = cx.host().now_ms();
    match cx
        .plugin()
        .flights
        .peek_now(cx.host(), key, (id, queue), now_ms)
    {
        Peek::Waiting => false,
        Peek::Done(Some(bytes)) => {
            deliver(cx, kinds, key, Some(&bytes));
            true
        }
        Peek::Done(None) => {
            deliver(cx, kinds, key, None);
            true
        }
        Peek::Gone => {
            let flight = cx.worker(|w| w.flights.end(key));
            for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
                release(cx, waiter.context_id, Release::LeaderGone);
            }
            true
        }
    }
}
