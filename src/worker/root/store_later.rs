//! Root: storing what it fetched after answering (see `worker::held`): which answers wait, and
//! storing them at the timer's quick tick, or at once when a request needs them first.

use crate::cache::storable::Answer;
use crate::coalesce::upstream::SharedFetch;
use crate::config::Config;
use crate::effects::host::Host;
use crate::worker::ctx::Ctx;
use crate::worker::held::{HeldAnswer, HeldFor};
use crate::worker::l2::write::after_origin_later;
use crate::worker::root::entity_fetch::split;
use crate::worker::root::timer::tick_soon;
use crate::worker::store::store_answer_at;

/// Whether a whole answer with `status` may be stored after its waiters are answered: only when
/// nothing they are answered with depends on storing it (the debug headers' reason and tags, the
/// CDN's tag headers, the access log's reason), and only a 200 (anything else is refused at once,
/// which costs nothing worth moving).
pub fn may_store_later(config: &Config, status: u16) -> bool {
    status == 200 && !config.debug_headers && config.cdn_tags.is_none() && !config.access_log
}

/// Holds the whole answer fetched for `fetch`, answered already, to store it soon; stores it now
/// past the bound (its L2 write still waits for the quick tick: nothing may be sent after an
/// answer in this callback).
pub fn hold_whole(
    cx: &mut Ctx<'_, impl Host>,
    fetch: SharedFetch,
    status: u16,
    (headers, body): (Vec<(String, Vec<u8>)>, Vec<u8>),
) {
    let held = HeldAnswer {
        for_: HeldFor::Whole(Box::new(fetch)),
        received_ms: cx.host().now_ms(),
        status,
        headers,
        body,
    };
    match cx.worker(|w| w.held.hold(held)) {
        Ok(()) => store_later(cx),
        Err(held) => {
            store(cx, *held);
            store_later(cx);
        }
    }
}

/// Has the root's timer store the held answers soon, once Envoy has written the answers just
/// made (see `timer::STORE_AFTER_MS`); stores them now if the host refuses.
pub fn store_later(cx: &mut Ctx<'_, impl Host>) {
    if !tick_soon(cx) {
        store_held(cx);
    }
}

/// Stores every held answer (the root's timer, or a request that needs one of them).
pub fn store_held(cx: &mut Ctx<'_, impl Host>) {
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
    match &held.for_ {
        HeldFor::Entities(batch) => {
            split(cx, batch, &answer, held.received_ms);
        }
        HeldFor::Whole(fetch) => {
            let mut stored =
                store_answer_at(cx, &fetch.key, answer, &fetch.asked, held.received_ms);
            after_origin_later(cx, fetch, &mut stored);
        }
    }
}
