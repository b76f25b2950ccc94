//! The root's timer: every [`TICK`] for its periodic work, and once soon after a batch was
//! answered, to split the answer into entities (see `entities::deferred`), or while a purge API
//! request waits for the fleet's log (see `admin::purge::answer_held`).

use crate::effects::host::{Host, RootHost};
use crate::worker::ctx::Ctx;
use std::time::Duration;

/// The timer's period.
pub const TICK: Duration = Duration::from_millis(100);
/// How soon after answering a batch the root splits its answer into entities: a timer, because
/// Envoy writes an answer to its socket in the next turn of its event loop, after anything
/// posted in this one (a queued message) has run, but before a timer that is not yet due. (An
/// entity batch that needs them and arrives first splits them before it looks: see
/// `entities::batch::look_up_l1_after_held`.)
pub const SPLIT_AFTER_MS: u64 = 1;
/// A quick tick does the timer's periodic work only if this long has passed since it last did
/// (timers may fire a little early).
pub const HOUSEKEEPING_DUE_MS: u64 = 90;

/// Makes the timer fire in [`SPLIT_AFTER_MS`] (once; it returns to [`TICK`] then). `false` if the
/// host refused.
pub fn tick_soon(cx: &mut Ctx<'_, impl Host>) -> bool {
    if cx.worker(|w| w.quick_tick) {
        return true;
    }
    let set = cx.host().set_tick_ms(SPLIT_AFTER_MS);
    if set {
        cx.worker(|w| w.quick_tick = true);
    }
    set
}

/// At a tick: sets the timer back to [`TICK`] if it was made quick; whether it was.
pub fn back_to_normal(cx: &mut Ctx<'_, impl RootHost>) -> bool {
    if !cx.worker(|w| std::mem::take(&mut w.quick_tick)) {
        return false;
    }
    cx.host().set_tick_ms(TICK.as_millis() as u64);
    true
}
