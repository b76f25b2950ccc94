//! The root's fallback timer: lets go requests held for a body that never came, waiters past
//! `max_wait_ms` and waiters of fetches that were lost; checks followed flights nobody woke this
//! worker for; empties finished records once their watchers had time to read them.

use crate::coalesce::liveness::{self, HEARTBEAT_MS};
use crate::coalesce::release::Release;
use crate::effects::counters::Counter;
use crate::effects::host::RootHost;
use crate::worker::admin::mutation_purge;
use crate::worker::admin::purge;
use crate::worker::ctx::Ctx;
use crate::worker::entities::fetch as entity_fetch;
use crate::worker::entities::plug::Entities;
use crate::worker::fleet::feed;
use crate::worker::fleet::write::flush;
use crate::worker::flights::answer::release;
use crate::worker::flights::followers::check;
use crate::worker::flights::permit::give_up;
use crate::worker::operation_counts;
use crate::worker::serving::recent;
use crate::worker::timer::{back_to_normal, HOUSEKEEPING_DUE_MS};

/// How long a finished flight record stays for other workers' timers before it is emptied.
pub const DONE_GRACE_MS: u64 = 1000;
/// A follower that heard nothing for this long checks its flight itself (lost wake-up).
pub const LOST_WAKEUP_MS: u64 = 500;

pub fn on_tick(cx: &mut Ctx<'_, impl RootHost>) {
    let now_ms = cx.host().now_ms();
    // Answers already relayed, before the L2 writes their entities queue go out.
    entity_fetch::split_held(cx);
    mutation_purge::apply_owed(cx);
    purge::answer_held(cx, now_ms);
    if back_to_normal(cx) {
        let last = cx.worker(|w| w.last_housekeeping_ms);
        if now_ms.saturating_sub(last) < HOUSEKEEPING_DUE_MS {
            flush(cx);
            return;
        }
    }
    cx.worker(|w| w.last_housekeeping_ms = now_ms);
    // Callouts first: everything below may answer requests.
    feed::poll(cx, now_ms);
    flush(cx);
    operation_counts::flush(cx);
    recent::flush(cx);
    heartbeat(cx, now_ms);
    release_hung_bodies(cx, now_ms);
    release_expired(cx, now_ms);
    check_unwoken(cx, now_ms);
    clear_published(cx, now_ms);
}

/// Tells other workers this one is alive, so they follow its flights (see `coalesce::liveness`).
pub fn heartbeat(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    if !cx.config().coalesce {
        return;
    }
    let (id, last) = cx.worker(|w| (w.id, w.last_beat_ms));
    if last != 0 && now_ms.saturating_sub(last) < HEARTBEAT_MS {
        return;
    }
    if liveness::beat(cx.host(), id, now_ms).is_ok() {
        cx.worker(|w| w.last_beat_ms = now_ms);
    }
}

fn release_hung_bodies(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    let hung = cx.worker(|w| w.watchdog.take_hung(now_ms));
    for context in hung {
        // A purge request never goes upstream: it is refused instead.
        if cx.worker(|w| w.held_purges.remove(&context)) {
            let body =
                br#"{"error":"the purge body never arrived: set allow_on_headers_stop_iteration"}"#;
            let host = cx.host();
            host.count(Counter::PurgeRejected);
            host.answer(
                context,
                503,
                vec![("content-type", "application/json")],
                body,
            );
        } else {
            release(cx, context, Release::BodyNotDelivered);
        }
    }
}

fn release_expired(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    let lease = cx.plugin().lease_ms();
    let max_wait_ms = cx.config().max_wait_ms;
    let (expired, me) = cx.worker(|w| {
        let expired = w.flights.expire(now_ms, max_wait_ms, lease);
        // L2 calls lost with them: their flights are among the lost ones.
        w.l2.forget_older_than(now_ms.saturating_sub(lease.saturating_mul(2)));
        (expired, w.id)
    });
    cx.host()
        .count_n(Counter::FetchFailures, expired.lost_fetches as u64);
    for waiter in expired.waited_too_long {
        cx.host().count(Counter::WaitTimeouts);
        release(cx, waiter.context_id, Release::WaitTimeout);
    }
    for (key, flight) in expired.lost {
        give_up(cx.plugin(), &cx.quiet(), me, &key);
        for waiter in flight.waiters {
            release(cx, waiter.context_id, Release::FetchLost);
        }
    }
}

fn check_unwoken(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    let unwoken = cx.worker(|w| w.flights.followed_for(now_ms, LOST_WAKEUP_MS));
    for key in unwoken {
        // Resolved by the timer rather than a wake-up: a lost or late wake-up, worth counting.
        if check(cx, &Entities, &key) {
            cx.host().count(Counter::LateWakeups);
        }
    }
}

fn clear_published(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    let (id, due) = cx.worker(|w| (w.id, w.flights.take_published(now_ms, DONE_GRACE_MS)));
    for (key, finished) in due {
        cx.plugin()
            .flights
            .clear_done(cx.host(), &key, id, finished);
    }
}
