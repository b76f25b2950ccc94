//! Finding a fresh entry for a key (this worker's copy first, then shared data) and serving it.
//! With invalidation on, every lookup first reads the purge epoch: a purge answered on any worker
//! is seen by the next lookup everywhere. Copies checked at the current epoch are served as they
//! are; others are checked against the marks once, then kept or dropped.

use crate::cache::entry::Entry;
use crate::cache::table::Lookup;
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RequestHost};
use crate::invalidate::marks::Verdict;
use crate::request::key::CacheKey;
use crate::worker::answer::{CACHE_HEADER, KEY_HEADER, TAGS_HEADER};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;
use std::rc::Rc;

/// A fresh entry for `key`: this worker's copy, else shared data (then copied here).
pub fn find(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl RequestHost,
    key: &CacheKey,
    now: u64,
) -> Option<Rc<[u8]>> {
    let invalidation = plugin.config.invalidation_on();
    if invalidation {
        refresh_marks(plugin, worker, host);
    }
    let epoch = worker.borrow().purges.epoch;
    let copy = worker.borrow_mut().hot.get(key, now);
    if let Some((entry, checked)) = copy {
        // Checked against the marks in force: served without decoding.
        if !invalidation || checked == epoch || verdict(worker, &entry) == Verdict::Fresh {
            worker.borrow_mut().hot.checked(key, epoch);
            return Some(entry);
        }
        // Purged here; shared data may hold a newer answer already.
        worker.borrow_mut().hot.remove(key);
    }
    let Lookup::Hit(bytes) = plugin.table.lookup(host, key, now) else {
        return None;
    };
    if invalidation {
        match verdict(worker, &bytes) {
            Verdict::Fresh => {}
            Verdict::Stale => {
                host.count(Counter::StaleMisses);
                return None;
            }
            Verdict::Purged => {
                host.count(Counter::PurgedMisses);
                return None;
            }
        }
    }
    let expires = Entry::peek(&bytes).map(|(_, e)| e).unwrap_or_default();
    let entry: Rc<[u8]> = bytes.into();
    worker
        .borrow_mut()
        .hot
        .insert(*key, Rc::clone(&entry), expires, epoch);
    Some(entry)
}

/// Rereads the purge marks if the epoch moved since this worker last read them.
pub fn refresh_marks(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host) {
    let epoch = plugin.purges.epoch(host);
    if epoch == worker.borrow().purges.epoch {
        return;
    }
    let view = plugin.purges.view(host, epoch);
    worker.borrow_mut().purges = view;
}

/// What the marks say of an entry.
fn verdict(worker: &RefCell<Worker>, bytes: &[u8]) -> Verdict {
    match Entry::decode(bytes) {
        Ok(e) => worker
            .borrow()
            .purges
            .verdict(e.born_us, e.tag_hashes.iter().copied()),
        // Not decodable: `serve` refuses it anyway.
        Err(_) => Verdict::Fresh,
    }
}

/// Answers the running request from a stored entry; `false` if the entry does not decode.
pub fn serve(
    plugin: &Plugin,
    host: &impl RequestHost,
    bytes: &[u8],
    key: &CacheKey,
    now: u64,
) -> bool {
    let Ok(entry) = Entry::decode(bytes) else {
        return false;
    };
    let age = (now.saturating_sub(entry.stored_at_ms) / 1000).to_string();
    let mut headers: Vec<(&str, &str)> = Vec::with_capacity(entry.headers.len() + 5);
    headers.extend(entry.headers.iter().copied());
    headers.push(("age", &age));
    headers.push((CACHE_HEADER, "HIT"));
    let hex;
    if plugin.config.debug_headers {
        hex = key.hex();
        headers.push((KEY_HEADER, &hex));
        if !entry.tags.is_empty() {
            headers.push((TAGS_HEADER, entry.tags));
        }
    }
    host.respond(entry.status, headers, entry.body);
    true
}
