//! Root: splitting what it fetched for a coalesced entity batch after answering (see
//! `worker::held`): at the timer's quick tick, or at once when a request needs it first.

use crate::cache::storable::Answer;
use crate::effects::host::Host;
use crate::worker::ctx::Ctx;
use crate::worker::held::HeldAnswer;
use crate::worker::root::entity_fetch::split;
use crate::worker::root::timer::tick_soon;

/// Has the root's timer split the held answers soon, once Envoy has written the answers just
/// made (see `timer::SPLIT_AFTER_MS`); splits them now if the host refuses.
pub fn split_later(cx: &mut Ctx<'_, impl Host>) {
    if !tick_soon(cx) {
        split_held(cx);
    }
}

/// Splits every held answer into entity entries (the root's timer, or a batch that needs one).
pub fn split_held(cx: &mut Ctx<'_, impl Host>) {
    while let Some(held) = cx.worker(|w| w.held.take_oldest()) {
        store(cx, held);
    }
}

fn store(cx: &mut Ctx<'_, impl Host>, held: HeldAnswer) {
    let answer = Answer {
        status: held.status,
        headers: &held.headers,
        body: &held.body,
    };
    split(cx, &held.batch, &answer, held.received_ms);
}
