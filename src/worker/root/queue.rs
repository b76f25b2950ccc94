//! Root: what arrives on this worker's wake-up queue: its requests asking it to send what they
//! queued, and other workers' wake-ups for flights this worker follows.

use crate::coalesce::wakeup::Message;
use crate::effects::host::RootHost;
use crate::worker::ctx::Ctx;
use crate::worker::entities::plug::Entities;
use crate::worker::flights::followers::{check, deliver};
use crate::worker::root::dispatch::dispatch_pending;

/// Root: the messages dequeued from this worker's wake-up queue. Fetches are dispatched before
/// anyone is answered.
pub fn on_messages(cx: &mut Ctx<'_, impl RootHost>, messages: &[Vec<u8>]) {
    let decoded: Vec<Message<'_>> = messages.iter().filter_map(|m| Message::decode(m)).collect();
    if decoded.contains(&Message::Dispatch) {
        dispatch_pending(cx);
    }
    for message in decoded {
        let Message::Wake { key, answer } = message else {
            continue;
        };
        match answer {
            // The answer came with the wake-up: no shared-data read, and no race with the next
            // flight of the same key overwriting the record.
            Some(bytes) => deliver(cx, &Entities, &key, Some(bytes)),
            None => {
                check(cx, &Entities, &key);
            }
        }
    }
}
