//! Following the fleet's purge log (root context, one follower per Envoy, elected by a lease in
//! shared data: `fleet::follower`): a long-poll on the L2 service's wait cluster, each record
//! applied to this Envoy's purge marks at the instant its node purged, so that what any Envoy
//! purged is not served by this one within a poll's delay (tens of ms). A new Envoy, and one that
//! finds a gap in the log (entries trimmed or deleted past its place, the log emptied), first
//! reads the snapshot beside the log (the latest purge of every target an entry could still
//! carry) and then follows the log from where the snapshot was taken: a gap costs a snapshot
//! read, not a purge of everything. Only a log begun anew (its purges lost) or a mark that cannot
//! be read purges everything. A read that fails makes L2 hits unusable until the log has been
//! read to its end again; reads failing for longer than the configured bound purge whatever was
//! born longer ago than the bound, for as long as they fail (misses, never stale-after-purge).

use crate::effects::counters::Counter;
use crate::effects::host::RootHost;
use crate::effects::store::StoreError;
use crate::fleet::calls::Call;
use crate::fleet::follower::{self, FeedState};
use crate::fleet::purge_log::{read_page, read_snapshot, PurgeRecord, Reader};
use crate::fleet::wire;
use crate::invalidate::marks::Target;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::serving::marks::mark;
use l2_proto::limits::{MAX_PURGES_ANSWER_BYTES, PURGES_PER_ANSWER};
use l2_proto::marks::MAX_MARKS_PAGE_BYTES;
use std::cell::Cell;

/// How long one read waits for a new record.
pub const FEED_WAIT_MS: u64 = 1000;
/// A read may come back this much later than its wait before it counts as failed: a late empty
/// page is no reason to stop trusting L2.
const FEED_SLACK_MS: u64 = 1000;
/// After a failed read, the next one waits this long.
pub const RETRY_MS: u64 = 250;
/// The snapshot's first page.
const SNAPSHOT_START: &str = "0";

/// The follower's lease: longer than its longest read, so a live follower keeps it.
fn lease_ms(timeout_ms: u64) -> u64 {
    FEED_WAIT_MS + FEED_SLACK_MS + timeout_ms + 1000
}

/// Root: starts a read of the log, or of the snapshot while this Envoy learns it, if this
/// worker follows the log (or may take it over) and no read is outstanding or a failure being
/// waited out.
pub fn poll(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    let Some(l2) = &cx.config().l2 else { return };
    let idle = cx.worker(|w| (!w.l2.feed.reading && now_ms >= w.l2.feed.next_ms).then_some(w.id));
    let Some(me) = idle else { return };
    let host = cx.host();
    let state = match follower::lead(host, me, now_ms, lease_ms(l2.timeout_ms)) {
        Ok(Some(state)) => state,
        Ok(None) | Err(_) => return,
    };
    let (call, callout, timeout) = match &state.snapshot {
        Some(cursor) => (
            Call::Snapshot,
            wire::read_marks(l2, cursor),
            l2.timeout_ms.saturating_add(FEED_SLACK_MS),
        ),
        None => {
            // Until it has caught up, the follower reads without waiting: L2 is not trusted yet.
            let wait_ms = if state.caught_up { FEED_WAIT_MS } else { 0 };
            let generation = state.generation.as_deref();
            let callout = wire::read_purges(l2, &state.cursor, generation, state.n, wait_ms);
            let timeout = wait_ms
                .saturating_add(FEED_SLACK_MS)
                .saturating_add(l2.timeout_ms);
            (Call::Feed, callout, timeout)
        }
    };
    match host.dispatch(&callout, timeout) {
        Ok(token) => cx.worker(|w| {
            w.l2.feed.reading = true;
            w.l2.sent(token, call, now_ms);
        }),
        Err(_) => failed(cx, now_ms),
    }
}

/// How a reader takes records now.
fn reader<'a>(l2: &'a crate::config::L2, now_us: u64) -> Reader<'a> {
    Reader {
        key: &l2.fleet_key,
        now_us,
        skew_us: l2.purge_skew_ms.saturating_mul(1000),
    }
}

/// The body of a read that came back whole with `200`.
fn body_of(host: &impl RootHost, returned: &Returned, limit: usize) -> Option<Vec<u8>> {
    match returned.status() {
        Some(200) if returned.body_size <= limit => host.callout_body(returned.body_size),
        _ => None,
    }
}

/// A read (of the log or the snapshot) came back: what `parse` makes of its body, with the
/// reader's clock; a read that failed is counted and retried later (`None`).
fn read_back<T>(
    cx: &mut Ctx<'_, impl RootHost>,
    returned: &Returned,
    limit: usize,
    parse: impl FnOnce(&[u8], &Reader<'_>) -> Option<T>,
) -> Option<(T, u64, u64)> {
    cx.worker(|w| w.l2.feed.reading = false);
    let host = cx.host();
    let now_ms = host.now_ms();
    let l2 = cx.config().l2.as_ref()?;
    let reader = reader(l2, host.now_us());
    let read = body_of(host, returned, limit).and_then(|body| parse(&body, &reader));
    if read.is_none() {
        failed(cx, now_ms);
    }
    Some((read?, now_ms, reader.now_us))
}

/// A read came back whole: reads are not failing, and this worker still follows.
fn read_ok(state: &mut FeedState, now_ms: u64, timeout_ms: u64) {
    state.failing_since_ms = 0;
    state.failsafe_done = false;
    state.lease_until_ms = now_ms.saturating_add(lease_ms(timeout_ms));
}

/// Root: a read of the log came back.
pub fn on_page(cx: &mut Ctx<'_, impl RootHost>, returned: &Returned) {
    let read = read_back(cx, returned, MAX_PURGES_ANSWER_BYTES, read_page);
    let (Some((page, now_ms, now_us)), Some(l2)) = (read, &cx.config().l2) else {
        return;
    };
    let known = follower::read(cx.host()).generation;
    // An answer without one is an older service's: it says nothing of generations.
    let new_generation = page.generation.is_some() && known.is_some() && page.generation != known;
    let everything = new_generation.then_some(now_us);
    if apply(cx, &page.records, everything).is_err() {
        return failed(cx, now_ms);
    }
    if page.gap && !new_generation {
        cx.host().count(Counter::L2PurgeGaps);
    }
    let me = cx.worker(|w| w.id);
    let still_mine = follower::record(cx.host(), me, |s| {
        read_ok(s, now_ms, l2.timeout_ms);
        if page.gap || new_generation {
            // Whatever was missed is in the snapshot: learn it again, then follow on.
            s.snapshot = Some(SNAPSHOT_START.to_string());
            s.caught_up = false;
            s.generation = page.generation.clone().or(s.generation.take());
            return;
        }
        s.cursor = page.cursor.clone();
        s.n = page.last_n.unwrap_or(s.n);
        s.generation = page.generation.clone().or(s.generation.take());
        // Fewer entries than a full page: the end of the log.
        s.caught_up = page.entries < PURGES_PER_ANSWER;
    });
    // The next read at once: nothing is answered in this callback, so dispatching is safe.
    if still_mine.unwrap_or(false) {
        poll(cx, now_ms);
    }
}

/// Root: a page of the snapshot came back. Its marks are applied as the log's records are; on
/// the last page, the follower goes on with the log from where the snapshot was taken.
pub fn on_snapshot(cx: &mut Ctx<'_, impl RootHost>, returned: &Returned) {
    let read = read_back(cx, returned, MAX_MARKS_PAGE_BYTES, read_snapshot);
    let (Some((page, now_ms, now_us)), Some(l2)) = (read, &cx.config().l2) else {
        return;
    };
    let state = follower::read(cx.host());
    let first = state.snapshot.as_deref() == Some(SNAPSHOT_START);
    let new_generation = state
        .generation
        .as_ref()
        .is_some_and(|g| *g != page.generation);
    // The log and its snapshot begun anew: whatever they held may be lost, everything before
    // now is purged. A mark that cannot be read (a key rotated out) purged something unknown,
    // no later than the log's time for it: everything born before that.
    let everything = match (new_generation, page.unreadable_until_us) {
        (true, _) => Some(now_us),
        (false, until) => until,
    };
    if apply(cx, &page.records, everything).is_err() {
        return failed(cx, now_ms);
    }
    let me = cx.worker(|w| w.id);
    let still_mine = follower::record(cx.host(), me, |s| {
        read_ok(s, now_ms, l2.timeout_ms);
        s.generation = Some(page.generation.clone());
        if new_generation && !first {
            // Begun anew while it was read: the pages before belong to the old one.
            s.snapshot = Some(SNAPSHOT_START.to_string());
            return;
        }
        if first {
            s.cursor = page.tip.clone();
            s.n = page.n;
        }
        s.snapshot = (page.cursor != SNAPSHOT_START).then(|| page.cursor.clone());
    });
    if still_mine.unwrap_or(false) {
        poll(cx, now_ms);
    }
}

/// Applies records, each at its own instant. `everything`: purges may have been lost for good,
/// so everything born before that instant is purged too (counted as a gap).
fn apply(
    cx: &mut Ctx<'_, impl RootHost>,
    records: &[PurgeRecord],
    everything: Option<u64>,
) -> Result<(), StoreError> {
    let mut timed: Vec<(Target, bool, u64)> = records
        .iter()
        .flat_map(|r| r.targets.iter().map(|&(t, soft)| (t, soft, r.at_us)))
        .collect();
    if let Some(at_us) = everything {
        timed.push((Target::All, false, at_us));
    }
    mark(cx, &timed)?;
    // Counted once the marks hold it: whoever reads the counter may rely on the purge.
    if everything.is_some() {
        cx.host().count(Counter::L2PurgeGaps);
    }
    for _ in records {
        cx.host().count(Counter::L2PurgesApplied);
    }
    Ok(())
}

/// A read failed: L2 hits are not trusted until the log is read to its end again. Once reads
/// have failed for longer than the bound, whatever was born more than the bound ago is purged,
/// again on every retry for as long as they fail: a purge made elsewhere meanwhile is unseen
/// here, so nothing is served longer than the bound after it was fetched.
fn failed(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    cx.host().count(Counter::L2Failures);
    let me = cx.worker(|w| {
        w.l2.feed.next_ms = now_ms.saturating_add(RETRY_MS);
        w.id
    });
    let Some(l2) = &cx.config().l2 else { return };
    let failsafe = Cell::new(None);
    let _ = follower::record(cx.host(), me, |s| {
        failsafe.set(None);
        s.caught_up = false;
        if s.failing_since_ms == 0 {
            s.failing_since_ms = now_ms;
        }
        if failsafe_due(s, l2.feed_failsafe_ms, now_ms) {
            failsafe.set(Some(!s.failsafe_done));
            s.failsafe_done = true;
        }
    });
    if let Some(first) = failsafe.get() {
        if first {
            cx.host().count(Counter::FeedFailSafe);
        }
        let before_ms = now_ms.saturating_sub(l2.feed_failsafe_ms);
        let all = [(Target::All, false, before_ms.saturating_mul(1000))];
        let _ = mark(cx, &all);
    }
}

/// Whether reads have failed for longer than `bound_ms` (0 turns the fail-safe off).
fn failsafe_due(state: &FeedState, bound_ms: u64, now_ms: u64) -> bool {
    bound_ms > 0 && now_ms.saturating_sub(state.failing_since_ms) >= bound_ms
}
