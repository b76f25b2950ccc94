//! Serving stale instead of an error: when the shared fetch for a key fails (5xx, timeout,
//! reset, or a callout Envoy refused because the cluster has no healthy host), every waiter gets
//! the stored answer instead, while it is within its stale-if-error window.

use crate::cache::entry::Entry;
use crate::cache::table::Lookup;
use crate::coalesce::relay::Response;
use crate::effects::host::{Host, RootHost};
use crate::invalidate::marks::Verdict;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::serving::marks::{refresh_marks, verdict};

/// Whether an answer is a failure the origin's stale answer may replace.
pub fn is_failure(response: &Response) -> bool {
    response.status >= 500
}

/// The stored answer for `key` to give instead of a failure, if it is within its window and not
/// purged.
pub fn instead_of_error(cx: &mut Ctx<'_, impl RootHost>, key: &CacheKey) -> Option<Response> {
    let bytes = error_entry(cx, key)?;
    let entry = Entry::decode(&bytes).ok()?;
    Some(Response::from_entry(&entry, cx.host().now_ms()))
}

/// The entry for `key` that may replace a failure: within its stale-if-error window (fresh
/// ones too) and not purged. For whole answers and entities alike.
pub fn error_entry(cx: &mut Ctx<'_, impl Host>, key: &CacheKey) -> Option<Vec<u8>> {
    let (bytes, _) = unpurged(cx, key)?;
    let entry = Entry::decode(&bytes).ok()?;
    if cx.host().now_ms() >= entry.error_until_ms() {
        return None;
    }
    Some(bytes)
}

/// The entry for `key` if it is fresh and not purged (what a request would be served from).
pub fn fresh_entry(cx: &mut Ctx<'_, impl Host>, key: &CacheKey) -> Option<Vec<u8>> {
    match unpurged(cx, key)? {
        (bytes, true) => Some(bytes),
        (_, false) => None,
    }
}

/// The entry stored for `key`, fresh (`true`) or past its lifetime, unless purged since.
fn unpurged(cx: &mut Ctx<'_, impl Host>, key: &CacheKey) -> Option<(Vec<u8>, bool)> {
    let now_ms = cx.host().now_ms();
    let table = &cx.plugin().table;
    let hash = table.hash(key);
    let found =
        cx.worker_and_shared(|w, shared| table.lookup(shared, &mut w.seen, key, hash, now_ms));
    let (bytes, fresh) = match found {
        Lookup::Hit(bytes) => (bytes, true),
        Lookup::Stale(bytes) => (bytes, false),
        Lookup::Miss(_) => return None,
    };
    if cx.config().invalidation_on() {
        refresh_marks(cx);
        if cx.worker(|w| verdict(w, &bytes)) == Verdict::Purged {
            return None;
        }
    }
    Some((bytes, fresh))
}
