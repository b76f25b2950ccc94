//! Telling others from the root's side: asking this worker's root to dispatch what requests
//! claimed, and waking the workers that watch a flight when it ends (kept apart from
//! `shared_fetch`, which entity fetches and prefetches use and which starts prefetches itself).

use crate::coalesce::upstream::SharedFetch;
use crate::coalesce::wakeup::Message;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;

/// Asks the root to dispatch what this worker's requests claimed (a callout made by a request
/// dies with that request).
pub fn request_dispatch(cx: &mut Ctx<'_, impl Host>) -> bool {
    let queue = cx.worker(|w| w.queue);
    queue.is_some_and(|q| cx.host().enqueue(q, &Message::Dispatch.encode()))
}

/// Queues `fetch` for the root to send and asks the root to: `true` when asked; else the fetch
/// is taken back (nothing would send it), and the caller gives up what it holds for it.
pub fn queue_for_root(cx: &mut Ctx<'_, impl Host>, fetch: SharedFetch) -> bool {
    let key = fetch.key;
    cx.worker(|w| w.pending.push(fetch));
    if request_dispatch(cx) {
        return true;
    }
    cx.worker(|w| w.pending.retain(|f| f.key != key));
    false
}

/// Ends a flight that will never be fetched: its watchers go upstream on their own.
pub fn abandon(cx: &mut Ctx<'_, impl Host>, key: &CacheKey) {
    let id = cx.worker(|w| w.id);
    let host = cx.host();
    let watchers = cx
        .plugin()
        .flights
        .complete(host, key, id, None, host.now_ms());
    wake(host, &watchers, key, None);
}

/// Wakes the workers watching `key`, with the shareable answer when there is one.
pub fn wake(host: &impl Host, watchers: &[u32], key: &CacheKey, answer: Option<&[u8]>) {
    if watchers.is_empty() {
        return;
    }
    let message = Message::Wake { key: *key, answer }.encode();
    for &queue in watchers {
        host.enqueue(queue, &message);
    }
}
