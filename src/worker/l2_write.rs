//! Writes to the fleet's L2, from the root context: what a leader fetched (stored there for
//! every other Envoy, or its lease given up), and the purge records requests queue. Nobody waits
//! for a write: a failed one is counted and, for purges, sent again on the next ticks.

use crate::cache::entry::Entry;
use crate::coalesce::upstream::{L2Role, SharedFetch};
use crate::config::L2;
use crate::effects::counters::Counter;
use crate::effects::host::{Callout, Host};
use crate::fleet::calls::{Call, Outgoing, PURGE_ATTEMPTS};
use crate::fleet::purge_log::records;
use crate::fleet::wire::{self, owner, L2Failure};
use crate::invalidate::marks::Target;
use crate::request::key::CacheKey;
use crate::worker::state::{Plugin, Worker};
use crate::worker::store::Stored;
use std::cell::RefCell;

/// After the origin answered `fetch` (or failed): a stored entry goes to L2 as well; a lease
/// held for an answer that is not stored is released, so a waiting node leads at once. Takes
/// the entry's bytes out of `stored`.
pub fn after_origin(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    fetch: &SharedFetch,
    stored: &mut Stored,
) {
    let Some(l2) = &plugin.config.l2 else { return };
    if !matches!(fetch.l2, L2Role::Lead | L2Role::Store) {
        return;
    }
    let me = owner(worker.borrow().id);
    let callout = match store_callout(l2, host, &fetch.key, &me, stored) {
        Some(store) => store,
        None if fetch.l2 == L2Role::Lead => wire::release(l2, &fetch.key, &me),
        None => return,
    };
    send(plugin, worker, host, Call::Write, &callout);
}

/// The store of what `stored` put in L1 (taking its bytes), if worth storing in L2.
fn store_callout(
    l2: &L2,
    host: &impl Host,
    key: &CacheKey,
    me: &str,
    stored: &mut Stored,
) -> Option<Callout> {
    if stored.not_stored.is_some() {
        return None;
    }
    let entry = std::mem::take(&mut stored.entry);
    let expires_at_ms = Entry::decode(&entry).ok()?.expires_at_ms;
    let ttl = l2_ttl_ms(expires_at_ms, host.now_ms(), l2.timeout_ms);
    if ttl == 0 {
        return None;
    }
    host.count(Counter::L2Stores);
    Some(wire::store(l2, key, ttl, me, entry))
}

/// A plain miss (it went upstream itself) stored in L1 goes to L2 too, sent by the root (a
/// callout made by a request dies with it). `true` when one was queued.
pub fn queue_store(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    key: &CacheKey,
    stored: &mut Stored,
) -> bool {
    let Some(l2) = &plugin.config.l2 else {
        return false;
    };
    let me = owner(worker.borrow().id);
    let Some(callout) = store_callout(l2, host, key, &me, stored) else {
        return false;
    };
    worker.borrow_mut().l2.queue(callout, false);
    true
}

/// How long L2 keeps an entry fresh until `expires_at_ms`: only while it is fresh (stale windows
/// are each Envoy's own), and gone `margin_ms` before it expires. Every Envoy's copy expires at
/// the same instant (the storing Envoy's); if L2 still answered with it then, each would find it
/// stale and fetch on its own. Gone a little early, the key is free, and its lease elects one
/// fetch for the fleet. 0: not worth storing.
pub fn l2_ttl_ms(expires_at_ms: u64, now_ms: u64, margin_ms: u64) -> u64 {
    expires_at_ms
        .saturating_sub(now_ms)
        .saturating_sub(margin_ms)
}

/// A refused fetch's lease, released on the next tick: the callback that found it refused
/// answers requests, and nothing may be dispatched after an answer.
pub fn release_later(plugin: &Plugin, worker: &RefCell<Worker>, fetch: &SharedFetch) {
    let Some(l2) = &plugin.config.l2 else { return };
    if fetch.l2 == L2Role::Lead {
        let mut w = worker.borrow_mut();
        let callout = wire::release(l2, &fetch.key, &owner(w.id));
        w.l2.queue(callout, false);
    }
}

/// Queues the records of a purge made at `at_us` for the fleet's purge log (sent by the root:
/// a callout made by a request dies with it). `false` without L2.
pub fn queue_purge(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    at_us: u64,
    targets: &[(Target, bool)],
) -> bool {
    let Some(l2) = &plugin.config.l2 else {
        return false;
    };
    let mut w = worker.borrow_mut();
    for record in records(at_us, targets) {
        w.l2.queue(wire::publish_purge(l2, record), true);
    }
    true
}

/// Root: sends every queued write.
pub fn flush(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host) {
    let outbox = std::mem::take(&mut worker.borrow_mut().l2.outbox);
    for out in outbox {
        if out.purge {
            host.count(Counter::L2PurgesSent);
            let callout = out.callout.clone();
            send(plugin, worker, host, Call::Purge(out), &callout);
        } else {
            send(plugin, worker, host, Call::Write, &out.callout);
        }
    }
}

fn send(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    call: Call,
    callout: &Callout,
) {
    let timeout = plugin.config.l2.as_ref().map_or(0, |l2| l2.timeout_ms);
    match host.dispatch(callout, timeout) {
        Ok(token) => worker.borrow_mut().l2.sent(token, call, host.now_ms()),
        Err(_) => failed(worker, host, call),
    }
}

/// Root: a write came back (`None`: reset).
pub fn on_written(
    worker: &RefCell<Worker>,
    host: &impl Host,
    call: Call,
    headers: Option<&[(String, Vec<u8>)]>,
) {
    let result = headers.map_or(Err(L2Failure::Unreachable), wire::written);
    if result.is_err() {
        failed(worker, host, call);
    }
}

fn failed(worker: &RefCell<Worker>, host: &impl Host, call: Call) {
    host.count(Counter::L2Failures);
    if let Call::Purge(out) = call {
        if out.attempts.saturating_add(1) < PURGE_ATTEMPTS {
            worker.borrow_mut().l2.outbox.push(Outgoing {
                attempts: out.attempts + 1,
                ..out
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l2_keeps_an_entry_a_little_less_long_than_it_is_fresh() {
        assert_eq!(l2_ttl_ms(11_000, 1_000, 50), 9_950);
        assert_eq!(
            l2_ttl_ms(1_040, 1_000, 50),
            0,
            "about to expire: not stored"
        );
        assert_eq!(l2_ttl_ms(900, 1_000, 50), 0);
    }
}
