//! Following the fleet's purge log (root context, every worker): a long-poll on the L2 service's
//! wait cluster, each record applied to this Envoy's purge marks at the instant its node purged,
//! so that what any Envoy purged is not served by this one within a poll's delay (tens of ms).
//! A read that fails makes L2 hits unusable until the log has been read to its end again: an
//! entry in L2 may have been purged by a record this Envoy has not seen.

use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::fleet::calls::Call;
use crate::fleet::purge_log::{read_page, Page};
use crate::fleet::wire::{self, status};
use crate::invalidate::marks::Target;
use crate::worker::lookup::refresh_marks;
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// How long one read waits for a new record.
pub const FEED_WAIT_MS: u64 = 1000;
/// A read may come back this much later than its wait before it counts as failed: a late empty
/// page is no reason to stop trusting L2.
const FEED_SLACK_MS: u64 = 1000;
/// After a failed read, the next one waits this long.
pub const RETRY_MS: u64 = 250;
/// The service answers at most this many records a read: fewer means the end of the log.
const PAGE_ENTRIES: usize = 100;
/// A page of 100 records of 64 KiB each, in base64, with room to spare.
const MAX_PAGE_BYTES: usize = 10 << 20;

/// Root: starts a read of the log unless one is outstanding or a failure is being waited out.
pub fn poll(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    let Some(l2) = &plugin.config.l2 else { return };
    let (cursor, wait_ms) = {
        let w = worker.borrow();
        let feed = &w.l2.feed;
        if feed.reading || now_ms < feed.next_ms {
            return;
        }
        // Until it has caught up, a node reads without waiting: it must not trust L2 yet.
        let wait = if feed.caught_up { FEED_WAIT_MS } else { 0 };
        (feed.cursor.clone(), wait)
    };
    let callout = wire::read_purges(l2, &cursor, wait_ms);
    let timeout = wait_ms
        .saturating_add(FEED_SLACK_MS)
        .saturating_add(l2.timeout_ms);
    match host.dispatch(&callout, timeout) {
        Ok(token) => {
            let mut w = worker.borrow_mut();
            w.l2.feed.reading = true;
            w.l2.sent(token, Call::Feed, now_ms);
        }
        Err(_) => failed(worker, host, now_ms),
    }
}

/// Root: a read of the log came back (`headers` `None`: reset).
pub fn on_page(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    headers: Option<&[(String, Vec<u8>)]>,
    body_size: usize,
) {
    worker.borrow_mut().l2.feed.reading = false;
    let now = host.now_ms();
    let page = match headers.and_then(status) {
        Some(200) if body_size <= MAX_PAGE_BYTES => host
            .callout_body(body_size)
            .and_then(|body| read_page(&body)),
        _ => None,
    };
    let Some(page) = page else {
        return failed(worker, host, now);
    };
    if apply(plugin, worker, host, &page, host.now_us()).is_err() {
        return failed(worker, host, now);
    }
    {
        let mut w = worker.borrow_mut();
        w.l2.feed.cursor = page.cursor.clone();
        w.l2.feed.caught_up = page.records.len() + page.skipped < PAGE_ENTRIES;
    }
    // The next read at once: nothing is answered in this callback, so dispatching is safe.
    poll(plugin, worker, host, now);
}

/// Applies a page's records, each at its own instant. A gap (the log was trimmed past this
/// node's cursor) purges everything born before the oldest record still there: what was missed
/// is older than that.
fn apply(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    page: &Page,
    now_us: u64,
) -> Result<(), crate::effects::store::StoreError> {
    let mut timed: Vec<(Target, bool, u64)> = page
        .records
        .iter()
        .flat_map(|r| r.targets.iter().map(|&(t, soft)| (t, soft, r.at_us)))
        .collect();
    if page.gap {
        let oldest = page.records.first().map_or(now_us, |r| r.at_us);
        timed.push((Target::All, false, oldest));
    }
    if timed.is_empty() {
        return Ok(());
    }
    if plugin.purges.apply_at(host, &timed)? {
        host.raise_purge_signal();
        refresh_marks(plugin, worker, host);
    }
    for _ in &page.records {
        host.count(Counter::L2PurgesApplied);
    }
    Ok(())
}

fn failed(worker: &RefCell<Worker>, host: &impl Host, now_ms: u64) {
    host.count(Counter::L2Failures);
    let mut w = worker.borrow_mut();
    w.l2.feed.caught_up = false;
    w.l2.feed.next_ms = now_ms.saturating_add(RETRY_MS);
}
