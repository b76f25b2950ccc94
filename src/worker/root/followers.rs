//! The followers' side: this worker's requests waiting on another worker's fetch, let go when its
//! wake-up arrives (with the answer, or to read the flight record), or when the timer finds the
//! flight done or gone.

use crate::coalesce::flights::Peek;
use crate::coalesce::liveness::Alive;
use crate::coalesce::relay::Response;
use crate::coalesce::release::Release;
use crate::coalesce::wakeup::Message;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::root::answer::{answer, release, Label, Reply};
use crate::worker::root::dispatch::dispatch_pending;
use crate::worker::root::stale::{instead_of_error, is_failure};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// Root: the messages dequeued from this worker's wake-up queue. Fetches are dispatched before
/// anyone is answered.
pub fn on_messages(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    messages: &[Vec<u8>],
) {
    let decoded: Vec<Message<'_>> = messages.iter().filter_map(|m| Message::decode(m)).collect();
    if decoded.contains(&Message::Dispatch) {
        dispatch_pending(plugin, worker, host);
    }
    for message in decoded {
        let Message::Wake { key, answer } = message else {
            continue;
        };
        match answer {
            // The answer came with the wake-up: no shared-data read, and no race with the next
            // flight of the same key overwriting the record.
            Some(bytes) => deliver(
                plugin,
                worker,
                host,
                &key,
                Response::decode_from_flight(bytes, &key),
            ),
            None => {
                check(plugin, worker, host, &key);
            }
        }
    }
}

/// Answers this worker's followers of `key` with `response`, or lets them go upstream.
fn deliver(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    key: &CacheKey,
    response: Option<Response>,
) {
    let flight = {
        let mut w = worker.borrow_mut();
        if !w.waiters.is_following(key) {
            return;
        }
        w.waiters.take(key)
    };
    let waiters = flight.map(|f| f.waiters).unwrap_or_default();
    // The leader's fetch failed: this worker's followers may still have a stale answer.
    let stale = match &response {
        Some(r) if is_failure(r) && !waiters.is_empty() => {
            instead_of_error(plugin, worker, host, key)
        }
        _ => None,
    };
    for waiter in waiters {
        let ctx = waiter.context_id;
        match (&stale, &response) {
            (Some(s), _) => answer(plugin, worker, host, ctx, key, Reply::new(s, Label::STALE)),
            (None, Some(r)) => answer(
                plugin,
                worker,
                host,
                ctx,
                key,
                Reply::new(r, Label::COALESCED),
            ),
            (None, None) => release(worker, host, ctx, Release::NotShareable),
        }
    }
}

/// A followed key may be done: reads its flight record. Returns whether its waiters were let go.
pub fn check(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, key: &CacheKey) -> bool {
    let (id, queue, following) = {
        let w = worker.borrow();
        (
            w.id,
            w.queue.unwrap_or_default(),
            w.waiters.is_following(key),
        )
    };
    if !following {
        return false;
    }
    let now_ms = host.now_ms();
    match plugin
        .flights
        .peek(host, key, id, queue, now_ms, &Alive::read(host, now_ms))
    {
        Peek::Waiting => false,
        Peek::Done(Some(bytes)) => {
            let response = Response::decode_from_flight(&bytes, key);
            deliver(plugin, worker, host, key, response);
            true
        }
        Peek::Done(None) => {
            deliver(plugin, worker, host, key, None);
            true
        }
        Peek::Gone => {
            let flight = worker.borrow_mut().waiters.take(key);
            for waiter in flight.map(|f| f.waiters).unwrap_or_default() {
                release(worker, host, waiter.context_id, Release::LeaderGone);
            }
            true
        }
    }
}
