//! Asking this worker's root for what only it may do (see `effects::host::RootHost`): any wing's
//! request-side code queues the work in the worker's state and asks the root with a message on
//! the worker's own wake-up queue.

use crate::coalesce::wakeup::Message;
use crate::effects::host::Host;
use crate::worker::ctx::Ctx;

/// Asks the root to dispatch what this worker's requests claimed (a callout made by a request
/// dies with that request).
pub fn request_dispatch(cx: &mut Ctx<'_, impl Host>) -> bool {
    let queue = cx.worker(|w| w.queue);
    queue.is_some_and(|q| cx.host().enqueue(q, &Message::Dispatch.encode()))
}
