//! The root's fallback timer: lets go requests held for a body that never came, waiters past
//! `max_wait_ms` and waiters of fetches that were lost; checks followed flights nobody woke this
//! worker for; empties finished records once their watchers had time to read them.

use crate::coalesce::liveness::{self, HEARTBEAT_MS};
use crate::coalesce::release::Release;
use crate::coalesce::waiters::LocalFlight;
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::l2::feed;
use crate::worker::l2::write::flush;
use crate::worker::root::answer::release;
use crate::worker::root::followers::check;
use crate::worker::root::shared_fetch::abandon;
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;
use std::time::Duration;

/// The timer's period.
pub const TICK: Duration = Duration::from_millis(100);
/// How long a finished flight record stays for other workers' timers before it is emptied.
pub const DONE_GRACE_MS: u64 = 1000;
/// A follower that heard nothing for this long checks its flight itself (lost wake-up).
pub const LOST_WAKEUP_MS: u64 = 500;

pub fn on_tick(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host) {
    let now_ms = host.now_ms();
    // Callouts first: everything below may answer requests.
    feed::poll(plugin, worker, host, now_ms);
    flush(plugin, worker, host);
    heartbeat(plugin, worker, host, now_ms);
    release_hung_bodies(worker, host, now_ms);
    release_expired(plugin, worker, host, now_ms);
    check_unwoken(plugin, worker, host, now_ms);
    clear_published(plugin, worker, host, now_ms);
}

/// Tells other workers this one is alive, so they follow its flights (see `coalesce::liveness`).
pub fn heartbeat(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    if !plugin.config.coalesce {
        return;
    }
    let (id, last) = {
        let w = worker.borrow();
        (w.id, w.last_beat_ms)
    };
    if last != 0 && now_ms.saturating_sub(last) < HEARTBEAT_MS {
        return;
    }
    if liveness::beat(host, id, now_ms).is_ok() {
        worker.borrow_mut().last_beat_ms = now_ms;
    }
}

fn release_hung_bodies(worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    let hung = worker.borrow_mut().watchdog.take_hung(now_ms);
    for context in hung {
        // A purge request never goes upstream: it is refused instead.
        if worker.borrow_mut().held_purges.remove(&context) {
            let body =
                br#"{"error":"the purge body never arrived: set allow_on_headers_stop_iteration"}"#;
            host.count(Counter::PurgeRejected);
            host.answer(
                context,
                503,
                vec![("content-type", "application/json")],
                body,
            );
        } else {
            release(worker, host, context, Release::BodyNotDelivered);
        }
    }
}

fn release_expired(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    let lease = plugin.lease_ms();
    let (expired, abandoned, lost_fetches) = {
        let mut w = worker.borrow_mut();
        let expired = w.waiters.expire(now_ms, plugin.config.max_wait_ms);
        let abandoned: Vec<(CacheKey, LocalFlight)> = w.waiters.take_abandoned(now_ms, lease);
        // A callout that never answered (it should time out at fetch_timeout_ms): forget it.
        let before = w.fetches.len();
        w.fetches
            .retain(|_, f| now_ms.saturating_sub(f.dispatched_ms) < lease.saturating_mul(2));
        // Their flights are abandoned above like any other lost fetch's.
        w.l2.forget_older_than(now_ms.saturating_sub(lease.saturating_mul(2)));
        (expired, abandoned, before - w.fetches.len())
    };
    for _ in 0..lost_fetches {
        host.count(Counter::FetchFailures);
    }
    for waiter in expired {
        host.count(Counter::WaitTimeouts);
        release(worker, host, waiter.context_id, Release::WaitTimeout);
    }
    for (key, flight) in abandoned {
        abandon(plugin, worker, host, &key);
        for waiter in flight.waiters {
            release(worker, host, waiter.context_id, Release::FetchLost);
        }
    }
}

fn check_unwoken(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    let unwoken: Vec<CacheKey> = {
        let w = worker.borrow();
        w.waiters
            .followed_keys()
            .into_iter()
            .filter(|k| {
                w.waiters
                    .oldest_wait(k)
                    .is_some_and(|since| now_ms.saturating_sub(since) >= LOST_WAKEUP_MS)
            })
            .collect()
    };
    for key in unwoken {
        // Resolved by the timer rather than a wake-up: a lost or late wake-up, worth counting.
        if check(plugin, worker, host, &key) {
            host.count(Counter::LateWakeups);
        }
    }
}

fn clear_published(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    let (id, due) = {
        let mut w = worker.borrow_mut();
        let (due, keep): (Vec<_>, Vec<_>) = w
            .published
            .drain(..)
            .partition(|(_, finished)| now_ms.saturating_sub(*finished) >= DONE_GRACE_MS);
        w.published = keep;
        (w.id, due)
    };
    for (key, finished) in due {
        plugin.flights.clear_done(host, &key, id, finished);
    }
}
