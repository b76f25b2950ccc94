//! Waking the workers that watch a flight when it ends.

use crate::coalesce::wakeup::Message;
use crate::effects::host::Host;
use crate::request::key::CacheKey;

/// Wakes the workers watching `key`, with the shareable answer when there is one.
pub fn wake(host: &impl Host, watchers: &[u32], key: &CacheKey, answer: Option<&[u8]>) {
    wake_by(
        |queue, message| host.enqueue(queue, message),
        watchers,
        key,
        answer,
    );
}

/// [`wake`], through whatever can reach the queues.
pub fn wake_by(
    enqueue: impl Fn(u32, &[u8]) -> bool,
    watchers: &[u32],
    key: &CacheKey,
    answer: Option<&[u8]>,
) {
    if watchers.is_empty() {
        return;
    }
    let message = Message::Wake { key: *key, answer }.encode();
    for &queue in watchers {
        enqueue(queue, &message);
    }
}
