//! Following the fleet's purge log (root context, one follower per Envoy, elected by a lease in
//! shared data: `fleet::follower`): a long-poll on the L2 service's wait cluster, each record
//! applied to this Envoy's purge marks at the instant its node purged, so that what any Envoy
//! purged is not served by this one within a poll's delay (tens of ms). A read that fails makes
//! L2 hits unusable until the log has been read to its end again: an entry in L2 may have been
//! purged by a record this Envoy has not seen. Reads failing for longer than the configured
//! bound purge everything born before they began (fail-safe: misses, never stale-after-purge).

use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::effects::store::StoreError;
use crate::fleet::calls::Call;
use crate::fleet::follower::{self, FeedState};
use crate::fleet::purge_log::{read_page, Page, Reader};
use crate::fleet::wire;
use crate::invalidate::marks::Target;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::marks::mark;
use l2_proto::limits::{MAX_PURGES_ANSWER_BYTES, PURGES_PER_ANSWER};
use std::cell::Cell;

/// How long one read waits for a new record.
pub const FEED_WAIT_MS: u64 = 1000;
/// A read may come back this much later than its wait before it counts as failed: a late empty
/// page is no reason to stop trusting L2.
const FEED_SLACK_MS: u64 = 1000;
/// After a failed read, the next one waits this long.
pub const RETRY_MS: u64 = 250;

/// The follower's lease: longer than its longest read, so a live follower keeps it.
fn lease_ms(timeout_ms: u64) -> u64 {
    FEED_WAIT_MS + FEED_SLACK_MS + timeout_ms + 1000
}

/// Root: starts a read of the log if this worker follows it (or may take it over) and no read
/// is outstanding or a failure being waited out.
pub fn poll(cx: &mut Ctx<'_, impl Host>, now_ms: u64) {
    let Some(l2) = &cx.config().l2 else { return };
    let idle = cx.worker(|w| (!w.l2.feed.reading && now_ms >= w.l2.feed.next_ms).then_some(w.id));
    let Some(me) = idle else { return };
    let host = cx.host();
    let state = match follower::lead(host, me, now_ms, lease_ms(l2.timeout_ms)) {
        Ok(Some(state)) => state,
        Ok(None) | Err(_) => return,
    };
    // Until it has caught up, the follower reads without waiting: L2 is not trusted yet.
    let wait_ms = if state.caught_up { FEED_WAIT_MS } else { 0 };
    let callout = wire::read_purges(l2, &state.cursor, state.generation.as_deref(), wait_ms);
    let timeout = wait_ms
        .saturating_add(FEED_SLACK_MS)
        .saturating_add(l2.timeout_ms);
    match host.dispatch(&callout, timeout) {
        Ok(token) => cx.worker(|w| {
            w.l2.feed.reading = true;
            w.l2.sent(token, Call::Feed, now_ms);
        }),
        Err(_) => failed(cx, now_ms),
    }
}

/// Root: a read of the log came back.
pub fn on_page(cx: &mut Ctx<'_, impl Host>, returned: &Returned) {
    cx.worker(|w| w.l2.feed.reading = false);
    let host = cx.host();
    let now_ms = host.now_ms();
    let Some(l2) = &cx.config().l2 else { return };
    let reader = Reader {
        key: &l2.fleet_key,
        now_us: host.now_us(),
        skew_us: l2.purge_skew_ms.saturating_mul(1000),
    };
    let body_size = returned.body_size;
    let page = match returned.status() {
        Some(200) if body_size <= MAX_PURGES_ANSWER_BYTES => host
            .callout_body(body_size)
            .and_then(|body| read_page(&body, &reader)),
        _ => None,
    };
    let Some(mut page) = page else {
        return failed(cx, now_ms);
    };
    let known = follower::read(host).generation;
    if known.is_some() && page.generation != known {
        // The log was lost and begun again: whatever it held past the cursor is gone.
        page.gap = true;
    }
    if apply(cx, &page, reader.now_us).is_err() {
        return failed(cx, now_ms);
    }
    let me = cx.worker(|w| w.id);
    let lease = lease_ms(l2.timeout_ms);
    let still_mine = follower::record(cx.host(), me, |s| {
        s.cursor = page.cursor.clone();
        s.generation = page.generation.clone();
        // Fewer entries than a full page: the end of the log.
        s.caught_up = page.entries < PURGES_PER_ANSWER;
        s.failing_since_ms = 0;
        s.failsafe_done = false;
        s.lease_until_ms = now_ms.saturating_add(lease);
    });
    // The next read at once: nothing is answered in this callback, so dispatching is safe.
    if still_mine.unwrap_or(false) {
        poll(cx, now_ms);
    }
}

/// Applies a page's records, each at its own instant. A gap purges everything born before now:
/// what was missed may be dated anywhere before (records do not arrive in time order, so the
/// oldest one still there bounds nothing).
fn apply(cx: &mut Ctx<'_, impl Host>, page: &Page, now_us: u64) -> Result<(), StoreError> {
    let mut timed: Vec<(Target, bool, u64)> = page
        .records
        .iter()
        .flat_map(|r| r.targets.iter().map(|&(t, soft)| (t, soft, r.at_us)))
        .collect();
    if page.gap {
        cx.host().count(Counter::L2PurgeGaps);
        timed.push((Target::All, false, now_us));
    }
    mark(cx, &timed)?;
    for _ in &page.records {
        cx.host().count(Counter::L2PurgesApplied);
    }
    Ok(())
}

/// A read failed: L2 hits are not trusted until the log is read to its end again, and once
/// reads have failed for longer than the bound, everything born before they began is purged.
fn failed(cx: &mut Ctx<'_, impl Host>, now_ms: u64) {
    cx.host().count(Counter::L2Failures);
    let me = cx.worker(|w| {
        w.l2.feed.next_ms = now_ms.saturating_add(RETRY_MS);
        w.id
    });
    let Some(l2) = &cx.config().l2 else { return };
    let failsafe_from = Cell::new(None);
    let _ = follower::record(cx.host(), me, |s| {
        failsafe_from.set(None);
        s.caught_up = false;
        if s.failing_since_ms == 0 {
            s.failing_since_ms = now_ms;
        }
        if failsafe_due(s, l2.feed_failsafe_ms, now_ms) {
            s.failsafe_done = true;
            failsafe_from.set(Some(s.failing_since_ms));
        }
    });
    if let Some(since_ms) = failsafe_from.get() {
        cx.host().count(Counter::FeedFailSafe);
        let all = [(Target::All, false, since_ms.saturating_mul(1000))];
        let _ = mark(cx, &all);
    }
}

/// Whether the purges missed since `state` began failing may be anywhere by now: 0 turns the
/// fail-safe off.
fn failsafe_due(state: &FeedState, bound_ms: u64, now_ms: u64) -> bool {
    bound_ms > 0
        && !state.failsafe_done
        && now_ms.saturating_sub(state.failing_since_ms) >= bound_ms
}
