//! Finding a fresh entry for a key (this worker's copy first, then shared data) and serving it.
//! With invalidation on, every lookup first reads the purge epoch: a purge answered on any worker
//! is seen by the next lookup everywhere.

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
    if let Some(entry) = worker.borrow_mut().hot.get(key, now) {
        return Some(entry);
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
        .insert(*key, Rc::clone(&entry), expires);
    Some(entry)
}

/// Rereads the purge marks if the epoch moved since this worker last read them, and then drops
/// its copies of entries (they were checked against the old marks).
pub fn refresh_marks(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host) {
    let epoch = plugin.purges.epoch(host);
    if epoch == worker.borrow().purges.epoch {
        return;
    }
    let view = plugin.purges.view(host, epoch);
    let mut w = worker.borrow_mut();
    w.purges = view;
    w.hot.clear();
}

fn verdict(worker: &RefCell<Worker>, bytes: &[u8]) -> Verdict {
    match Entry::decode(bytes) {
        Ok(e) => worker
            .borrow()
            .purges
            .verdict(e.born_ms, e.tag_hashes.iter().copied()),
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
