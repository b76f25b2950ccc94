//! Finding a fresh entry for a key (this worker's copy first, then shared data) and serving it.

use crate::cache::entry::Entry;
use crate::cache::table::Lookup;
use crate::effects::host::RequestHost;
use crate::request::key::CacheKey;
use crate::worker::answer::{CACHE_HEADER, KEY_HEADER};
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
    if let Some(entry) = worker.borrow_mut().hot.get(key, now) {
        return Some(entry);
    }
    let Lookup::Hit(bytes) = plugin.table.lookup(host, key, now) else {
        return None;
    };
    let expires = Entry::peek(&bytes).map(|(_, e)| e).unwrap_or_default();
    let entry: Rc<[u8]> = bytes.into();
    worker
        .borrow_mut()
        .hot
        .insert(*key, Rc::clone(&entry), expires);
    Some(entry)
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
    let mut headers: Vec<(&str, &str)> = Vec::with_capacity(entry.headers.len() + 4);
    headers.extend(entry.headers.iter().copied());
    headers.push(("age", &age));
    headers.push((CACHE_HEADER, "HIT"));
    let hex;
    if plugin.config.debug_headers {
        hex = key.hex();
        headers.push((KEY_HEADER, &hex));
    }
    host.respond(entry.status, headers, entry.body);
    true
}
